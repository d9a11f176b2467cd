"""The OpenAI-compatible routes, each also under ``/sessions/{session_id}``."""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from ..backends import OPENAI_ENDPOINTS, Endpoint
from ..backends.pool import UpstreamPool
from ..errors import SeedProxyError, UpstreamError, error_body
from ..pipeline.admission import Admission
from .access import Access

__all__ = ["find_model", "openai_router"]

_PREFIXES = ("", "/sessions/{session_id}")
_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": {"type": "object"}}},
    }
}


def openai_router(admission: Admission, access: Access, pool: UpstreamPool) -> APIRouter:
    router = APIRouter()

    def route(endpoint: Endpoint):  # type: ignore[no-untyped-def]
        async def handler(request: Request) -> Response:
            named = request.path_params.get("session_id")
            try:
                session = await access.session_for(request, named, cached=True)
            except SeedProxyError as exc:
                admission.refused(endpoint, exc, named)
                raise
            return await admission.handle(
                request, endpoint, session,
                lambda: access.session_for(request, named, cached=True))

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

        async def model(request: Request) -> Response:
            """One model's card, as SGLang serves it, taken from the upstream's list."""
            await access.session_for(request, request.path_params.get("session_id"))
            upstream = await pool.get("/v1/models")
            if upstream.status_code != 200:
                return Response(upstream.content, status_code=upstream.status_code,
                                media_type=upstream.headers.get("content-type"))
            name = request.path_params["model"]
            card = find_model(upstream.content, name)
            if card is None:
                message = f"The model '{name}' does not exist"
                body = error_body(message, "invalid_request_error", param="model",
                                  code="model_not_found")
                return JSONResponse(body, status_code=404)
            return JSONResponse(card)

        router.add_api_route(prefix + "/v1/models", models, methods=["GET"])
        router.add_api_route(prefix + "/v1/models/{model:path}", model, methods=["GET"])
    return router


def find_model(listing: bytes, name: str) -> dict[str, Any] | None:
    """The card named ``name`` in an upstream's ``/v1/models`` answer (``default``: the
    first it lists); None when it lists no such model. A listing not in OpenAI's shape
    is the upstream's fault (502)."""
    try:
        data = orjson.loads(listing)
    except orjson.JSONDecodeError:
        raise UpstreamError("upstream answered /v1/models with invalid JSON") from None
    cards = data.get("data") if isinstance(data, dict) else None
    if not isinstance(cards, list):
        raise UpstreamError("upstream's /v1/models answer has no data list")
    for card in cards:
        if isinstance(card, dict) and card.get("id") == name:
            return card
    if name == "default":  # what the examples send: the model the upstream serves
        return next((card for card in cards if isinstance(card, dict)), None)
    return None
