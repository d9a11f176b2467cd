"""Anthropic's ``POST /v1/messages`` (and ``/v1/messages/count_tokens``), also under
``/sessions/{id}``, served through the upstream's chat route with the derived seed.

The request path is the forwarder's: the body is read and translated first (a 4xx
consumes no index), then the slot is taken, then the chat translation goes upstream
through the backend's capture path; the interaction records the Messages request and
the Message the client received. Every error on these routes, auth included, comes
in Anthropic's shape ``{"type": "error", "error": {"type", "message"}}``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import orjson
from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response

from ..backends import Endpoint
from ..backends.anthropic_bridge import anthropic_error, to_chat
from ..errors import BadRequest, SeedProxyError, SessionNotFound
from ..sessions import NewSession, SessionRecord
from .access import Access
from .headers import is_sdk_retry, pinned_index
from .presentation import messages_presentation
from .request import parse_body, read_body
from .tito import exchange_tito, prepare_tito
from .translated import exchange_translated

if TYPE_CHECKING:
    from .forward import Forwarder, Plan

__all__ = ["PromptCounter", "messages_router"]

log = logging.getLogger("seedproxy.request")

PromptCounter = Callable[[dict[str, Any]], int]
"""Counts a chat body's prompt tokens as the upstream renders them; raises
``ValueError`` for a prompt it cannot render. Known only with a tokenizer at hand
(the embedded engine's)."""

ErrorRenderer = Callable[[Request, SeedProxyError], Awaitable[Response]]

_PREFIXES = ("", "/sessions/{session_id}")
_BODY = {"requestBody": {"required": True,
                         "content": {"application/json": {"schema": {"type": "object"}}}}}


def messages_router(
    forwarder: Forwarder, access: Access, on_error: ErrorRenderer,
    counter: PromptCounter | None = None,
) -> APIRouter:
    """The Messages routes, and ``HEAD /`` (Claude Code's probe)."""
    router = APIRouter()

    async def anthropic_shaped(request: Request, exc: SeedProxyError) -> Response:
        plain = await on_error(request, exc)  # the status and x-seedproxy-* headers
        return _reshaped(plain, exc.message)

    async def messages(request: Request) -> Response:
        try:
            session = await access.session_for(request, request.path_params.get("session_id"))
            return await forward_messages(forwarder, request, session)
        except SeedProxyError as exc:
            return await anthropic_shaped(request, exc)

    async def count_tokens(request: Request) -> Response:
        try:
            await access.session_for(request, request.path_params.get("session_id"))
            raw = await read_body(request, forwarder.settings.max_body_bytes)
            body = parse_body(Endpoint.MESSAGES, raw).body
            if counter is None:
                raise SessionNotFound(
                    "count_tokens needs a tokenizer, and none is known for this upstream "
                    "(it is known with the embedded engine)"
                )
            chat = to_chat({**body, "max_tokens": 1, "stream": False})
            try:
                count = await asyncio.to_thread(counter, chat)
            except ValueError as exc:
                raise BadRequest(f"cannot render this prompt: {exc}") from None
            return JSONResponse({"input_tokens": count})
        except SeedProxyError as exc:
            return await anthropic_shaped(request, exc)

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


def _reshaped(plain: Response, message: str) -> Response:
    dropped = ("content-length", "content-type")
    headers = {k: v for k, v in plain.headers.items() if k not in dropped}
    return JSONResponse(anthropic_error(plain.status_code, message), plain.status_code,
                        headers=headers)


async def forward_messages(
    fwd: Forwarder, request: Request, session: SessionRecord | NewSession | None
) -> Response:
    """One Messages request: translate, take the slot, exchange."""
    arrived = time.perf_counter()
    request.state.seedproxy_arrived = arrived
    raw = await read_body(request, fwd.settings.max_body_bytes)
    client = parse_body(Endpoint.MESSAGES, raw)
    if client.n != 1:
        raise BadRequest("n: the Messages API answers one message per request", param="n")
    chat = to_chat(client.body)  # before the slot: an untranslatable body uses no index
    # Token in, token out: rendered here too (a 4xx still uses no index).
    turn = await prepare_tito(fwd, chat, session) if fwd.tito is not None else None
    headers = request.headers
    plan = await fwd.plan(client, session, pinned_index(headers), is_sdk_retry(headers), arrived)
    request.state.seedproxy_plan = plan
    plan.present = messages_presentation(plan.client.body, _seed(plan))
    exchange = (exchange_translated(fwd, plan, chat, plan.present) if turn is None
                else exchange_tito(fwd, plan, turn))
    answered = await fwd.run(plan, exchange, request)
    if answered.status_code >= 400 and answered.body:  # an upstream error: reshape it
        # (an empty body is the 499 for a client that left: nobody reads it)
        error = orjson.loads(bytes(answered.body))["error"]
        return _reshaped(answered, str(error["message"]))
    return answered


def _seed(plan: Plan) -> int | None:
    return plan.seeds[0] if plan.seeds else None
