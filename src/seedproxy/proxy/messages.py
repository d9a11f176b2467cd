"""Anthropic's ``POST /v1/messages`` (and ``/v1/messages/count_tokens``), also under
``/sessions/{id}``, served through the upstream's chat route with the derived seed.

The request path is the pipeline's (``pipeline.admission``, Messages admission): the
body is read and translated first (a 4xx consumes no index), then the slot is taken,
then the chat translation goes upstream through the backend's capture path; the
interaction records the Messages request and the Message the client received. Every
error on these routes, auth included, comes in Anthropic's shape
``{"type": "error", "error": {"type", "message"}}``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response

from ..backends import Endpoint
from ..backends.anthropic_bridge import to_chat
from ..errors import BadRequest, SeedProxyError, SessionNotFound
from ..pipeline.admission import Admission
from ..pipeline.presenters import MessagesPresenter
from ..pipeline.request import client_request, read_body
from .access import Access

__all__ = ["PromptCounter", "messages_router"]

PromptCounter = Callable[[dict[str, Any]], int]
"""Counts a chat body's prompt tokens as the upstream renders them; raises
``ValueError`` (or ``BadRequest``) for a prompt it cannot render. Known only with a
tokenizer at hand (the embedded engine's, or token-in-token-out mode's)."""

_PREFIXES = ("", "/sessions/{session_id}")
_BODY = {"requestBody": {"required": True,
                         "content": {"application/json": {"schema": {"type": "object"}}}}}


def messages_router(
    admission: Admission, access: Access, counter: PromptCounter | None = None,
) -> APIRouter:
    """The Messages routes, and ``HEAD /`` (Claude Code's probe)."""
    router = APIRouter()
    refusal = MessagesPresenter({}, None)
    max_body_bytes = admission.services.settings.max_body_bytes

    async def messages(request: Request) -> Response:
        named = request.path_params.get("session_id")
        try:
            session = await access.session_for(request, named, cached=True)
        except SeedProxyError as exc:
            admission.refused(Endpoint.MESSAGES, exc, named)
            return refusal.error_response(exc, {})
        return await admission.handle(
            request, Endpoint.MESSAGES, session,
            lambda: access.session_for(request, named, cached=True))

    async def count_tokens(request: Request) -> Response:
        try:
            await access.session_for(request, request.path_params.get("session_id"))
            raw = await read_body(request, max_body_bytes)
            decoded = await admission.services.parser.body(Endpoint.MESSAGES, raw)
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
        except SeedProxyError as exc:
            return refusal.error_response(exc, {})

    for prefix in _PREFIXES:
        router.add_api_route(prefix + "/v1/messages", messages, methods=["POST"],
                             openapi_extra=_BODY,
                             name=f"messages{'_in_session' if prefix else ''}")
        router.add_api_route(prefix + "/v1/messages/count_tokens", count_tokens,
                             methods=["POST"], openapi_extra=_BODY,
                             name=f"count_tokens{'_in_session' if prefix else ''}")

    async def probe() -> Response:
        return Response(status_code=200)

    router.add_api_route("/", probe, methods=["HEAD"], include_in_schema=False)
    return router
