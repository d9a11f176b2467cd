"""The OpenAI-compatible routes, each also under ``/sessions/{session_id}``."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from ..backends import OPENAI_ENDPOINTS, Endpoint
from ..backends.pool import UpstreamPool
from .access import Access
from .forward import Forwarder

__all__ = ["openai_router"]

_PREFIXES = ("", "/sessions/{session_id}")
_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": {"type": "object"}}},
    }
}


def openai_router(forwarder: Forwarder, access: Access, pool: UpstreamPool) -> APIRouter:
    router = APIRouter()

    def route(endpoint: Endpoint):  # type: ignore[no-untyped-def]
        async def handler(request: Request) -> Response:
            session = await access.session_for(request, request.path_params.get("session_id"))
            return await forwarder.forward(request, endpoint, session)

        handler.__name__ = endpoint.name.lower()
        return handler

    for prefix in _PREFIXES:
        for endpoint in OPENAI_ENDPOINTS:
            router.add_api_route(
                prefix + endpoint.value,
                route(endpoint),
                methods=["POST"],
                openapi_extra=_BODY,
                name=f"{endpoint.name.lower()}{'_in_session' if prefix else ''}",
            )

        async def models(request: Request) -> Response:
            await access.session_for(request, request.path_params.get("session_id"))
            upstream = await pool.get("/v1/models")
            return Response(
                upstream.content,
                status_code=upstream.status_code,
                media_type=upstream.headers.get("content-type", "application/json"),
            )

        router.add_api_route(prefix + "/v1/models", models, methods=["GET"])
    return router
