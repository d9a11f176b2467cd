"""The routes each also under ``/sessions/{session_id}``: the admission routes as
FastAPI declares them (``hot.py`` answers them first), the model listing and Messages'
``count_tokens``; and ``HEAD /`` (Claude Code's probe). Every error on the Messages
routes, auth included, comes in Anthropic's shape.

SGLang's server routes are answered by the fleet: the health, info and token routes go
to the least busy healthy server, whose answer is passed on as it came; ``/flush_cache``
goes to every server, answered per server.
- Bodies are bounded (413) and must be a JSON object (400) before anything is sent.
- The health routes are open; the info and token routes need what ``/v1/models``
  needs; ``/flush_cache`` needs the admin key.
- ``/flush_cache`` is 200 when every server flushed; else 503 when one could not be
  reached, else 400 (SGLang's answer when it does not flush).
- ``/readyz`` (open) is 200 when some upstream answers and is neither degraded nor
  draining, and the session store answers; else 503, with each one's reason.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from ..bridges.anthropic import to_chat
from ..dialects import Endpoint
from ..errors import BadRequest, ModelNotFound, SessionNotFound, StoreError, UpstreamError
from ..fleet.control import FleetControl
from ..fleet.pool import UpstreamPool
from ..pipeline.request import client_request, read_body
from ..pipeline.services import Services
from ..sessions import SessionStore
from ..transport.body import UpstreamResponse
from .access import Access
from .hot import HotRoutes

__all__ = ["PromptCounter", "api_router", "find_model", "server_router", "warn_if_no_upstream"]

log = logging.getLogger("seedproxy")

PromptCounter = Callable[[dict[str, Any]], int]
"""Counts a chat body's prompt tokens as the upstream renders them; ``ValueError`` (or
``BadRequest``) for a prompt it cannot render."""

_PREFIXES = ("", "/sessions/{session_id}")
_BODY = {"requestBody": {"required": True,
                         "content": {"application/json": {"schema": {"type": "object"}}}}}


def api_router(hot: HotRoutes, access: Access, pool: UpstreamPool, services: Services,
               counter: PromptCounter | None = None) -> APIRouter:
    router = APIRouter()

    def route(endpoint: Endpoint) -> Callable[[Request], Awaitable[Response]]:
        async def handler(request: Request) -> Response:
            return await hot.answer(request, endpoint, request.path_params.get("session_id"))

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
        return _passed_on(await pool.get("/v1/models"), "application/json")

    async def model(request: Request) -> Response:
        await access.session_for(request, request.path_params.get("session_id"))
        upstream = await pool.get("/v1/models")
        if upstream.status_code != 200:
            return _passed_on(upstream)
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


_OPEN = ("/health", "/health_generate")
_INFO = ("/get_model_info", "/get_server_info")
_TOKENS = ("/tokenize", "/v1/tokenize", "/detokenize")


def _passed_on(upstream: UpstreamResponse, media_type: str | None = None) -> Response:
    return Response(upstream.content, status_code=upstream.status_code,
                    media_type=upstream.headers.get("content-type", media_type))


def server_router(pool: UpstreamPool, fleet: FleetControl, access: Access,
                  store: SessionStore) -> APIRouter:
    router = APIRouter()

    async def open_route(request: Request) -> Response:
        return _passed_on(await pool.get(request.url.path))

    async def info_route(request: Request) -> Response:
        await access.session_for(request, None)
        return _passed_on(await pool.get(request.url.path))

    async def token_route(request: Request) -> Response:
        await access.session_for(request, None)
        raw = await read_body(request, access.max_body_bytes)
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise BadRequest("the body is not valid JSON") from None
        if not isinstance(body, dict):
            raise BadRequest("the body must be a JSON object")
        return _passed_on(await pool.get(request.url.path, method="POST", body=raw))

    async def flush_cache(request: Request) -> JSONResponse:
        await access.require_admin(request)
        results = await fleet.fan_out("/flush_cache", {}, fleet.pool.upstreams)
        if all(r["ok"] for r in results):
            status = 200
        else:
            status = 503 if any(r["status"] is None for r in results) else 400
        return JSONResponse({"success": status == 200, "upstreams": results},
                            status_code=status)

    for path in _OPEN:
        router.add_api_route(path, open_route, methods=["GET"], name=path.strip("/"))
    for path in _INFO:
        router.add_api_route(path, info_route, methods=["GET"], name=path.strip("/"))
    for path in _TOKENS:
        router.add_api_route(path, token_route, methods=["POST"],
                             name=path.strip("/").replace("/", "_"))
    for method in ("GET", "POST"):  # one operation each: OpenAPI ids must be unique
        router.add_api_route("/flush_cache", flush_cache, methods=[method],
                             operation_id=f"flush_cache_{method.lower()}")

    @router.get("/readyz")
    async def readyz() -> JSONResponse:
        probed = pool.upstreams  # the list probed, whatever joins or leaves meanwhile
        reasons = await pool.probe()
        upstreams = [
            {"url": u.url, "up": reasons[u.url] is None, "degraded": u.degraded,
             "reason": reasons[u.url]
             or ("degraded: its recent requests all timed out" if u.degraded else None)
             or ("draining: it left the fleet" if u.draining else None)}
            for u in probed
        ]
        try:
            await store.count_open()
            stored: str | None = None
        except StoreError as exc:
            stored = exc.message
        ready = stored is None and any(u["reason"] is None for u in upstreams)
        body = {"ready": ready, "upstreams": upstreams,
                "store": {"up": stored is None, "reason": stored}}
        return JSONResponse(body, status_code=200 if ready else 503)

    return router


async def warn_if_no_upstream(pool: UpstreamPool) -> None:
    """At start-up: one WARNING when no upstream answers."""
    reasons = await pool.probe()
    if all(reason is not None for reason in reasons.values()):
        detail = "; ".join(f"{url}: {reason}" for url, reason in reasons.items())
        log.warning("no upstream answers /health yet (requests will get 503): %s", detail)
