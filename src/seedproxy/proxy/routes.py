"""The routes each also under ``/sessions/{session_id}``: the admission routes as
FastAPI declares them (``hot.py`` answers them first), the model listing and Messages'
``count_tokens``; and ``HEAD /`` (Claude Code's probe). Every error on the Messages
routes, auth included, comes in Anthropic's shape."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from ..bridges.anthropic import to_chat
from ..dialects import Endpoint
from ..errors import BadRequest, ModelNotFound, SessionNotFound, UpstreamError
from ..fleet.pool import UpstreamPool
from ..pipeline.request import client_request, read_body
from ..pipeline.services import Services
from .access import Access
from .hot import HotRoutes

__all__ = ["PromptCounter", "api_router", "find_model"]

PromptCounter = Callable[[dict[str, Any]], int]
"""Counts a chat body's prompt tokens as the upstream renders them; ``ValueError`` (or
``BadRequest``) for a prompt it cannot render."""

_PREFIXES = ("", "/sessions/{session_id}")
_BODY = {"requestBody": {"required": True,
                         "content": {"application/json": {"schema": {"type": "object"}}}}}


def api_router(hot: HotRoutes, access: Access, pool: UpstreamPool, services: Services,
               counter: PromptCounter | None = None) -> APIRouter:
    router = APIRouter()

    def route(endpoint: Endpoint):  # type: ignore[no-untyped-def]
        async def handler(request: Request) -> Response:
            return await hot.answer(request, endpoint, request.path_params.get("session_id"))

        handler.__name__ = endpoint.name.lower()
        return handler

    async def count_tokens(request: Request) -> Response:
        await access.session_for(request, request.path_params.get("session_id"))
        raw = await read_body(request, services.settings.max_body_bytes)
        decoded = await services.parser.body(Endpoint.MESSAGES, raw)
        body = client_request(Endpoint.MESSAGES, raw, decoded).body
        if counter is None:
            raise SessionNotFound(
                "count_tokens needs a tokenizer, and none is known for this upstream "
                "(it is known with the embedded engine or --token-in-token-out)"
            )
        chat = to_chat({**body, "max_tokens": 1, "stream": False})
        try:
            count = await asyncio.to_thread(counter, chat)
        except ValueError as exc:
            raise BadRequest(f"cannot render this prompt: {exc}") from None
        return JSONResponse({"input_tokens": count})

    async def models(request: Request) -> Response:
        await access.session_for(request, request.path_params.get("session_id"))
        upstream = await pool.get("/v1/models")
        return Response(upstream.content, status_code=upstream.status_code,
                        media_type=upstream.headers.get("content-type", "application/json"))

    async def model(request: Request) -> Response:
        await access.session_for(request, request.path_params.get("session_id"))
        upstream = await pool.get("/v1/models")
        if upstream.status_code != 200:
            return Response(upstream.content, status_code=upstream.status_code,
                            media_type=upstream.headers.get("content-type"))
        name = request.path_params["model"]
        card = find_model(upstream.content, name)
        if card is None:
            raise ModelNotFound(f"The model '{name}' does not exist", param="model",
                                code="model_not_found")
        return JSONResponse(card)

    for prefix in _PREFIXES:
        suffix = "_in_session" if prefix else ""
        for endpoint in Endpoint:
            router.add_api_route(prefix + endpoint.value, route(endpoint), methods=["POST"],
                                 openapi_extra=_BODY, name=endpoint.name.lower() + suffix)
        router.add_api_route(prefix + "/v1/models", models, methods=["GET"])
        router.add_api_route(prefix + "/v1/models/{model:path}", model, methods=["GET"])
        router.add_api_route(prefix + "/v1/messages/count_tokens", count_tokens,
                             methods=["POST"], openapi_extra=_BODY, name="count_tokens" + suffix)

    async def probe() -> Response:
        return Response(status_code=200)

    router.add_api_route("/", probe, methods=["HEAD"], include_in_schema=False)
    return router


def find_model(listing: bytes, name: str) -> dict[str, Any] | None:
    """The card named ``name`` in an upstream's ``/v1/models`` answer (``default``: the
    first it lists), or None; a listing not in OpenAI's shape is a 502."""
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
