"""SGLang's server routes, answered by the fleet: the health, info and token routes go to
the least busy healthy server, whose answer is passed on as it came; ``/flush_cache``
goes to every server, answered per server.

Invariants:
- Bodies are bounded (413) and must be a JSON object (400) before anything is sent.
- The health routes are open; the info and token routes need what ``/v1/models``
  needs; ``/flush_cache`` needs the admin key.
- ``/flush_cache`` is 200 when every server flushed; else 503 when one could not be
  reached, else 400 (SGLang's answer when it does not flush).
- ``/readyz`` (open) is 200 when some upstream answers and is neither degraded nor
  draining, and the session store answers; else 503, with each one's reason.
"""

from __future__ import annotations

import logging

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from ..errors import BadRequest, StoreError
from ..fleet.control import FleetControl
from ..fleet.pool import UpstreamPool
from ..pipeline.request import read_body
from ..sessions import SessionStore
from ..transport.body import UpstreamResponse
from .access import Access

__all__ = ["readiness_router", "server_router", "warn_if_no_upstream"]

log = logging.getLogger("seedproxy")

_OPEN = ("/health", "/health_generate")
_INFO = ("/get_model_info", "/get_server_info")
_TOKENS = ("/tokenize", "/v1/tokenize", "/detokenize")


def _passed_on(upstream: UpstreamResponse) -> Response:
    return Response(upstream.content, status_code=upstream.status_code,
                    media_type=upstream.headers.get("content-type"))


def server_router(pool: UpstreamPool, fleet: FleetControl, access: Access) -> APIRouter:
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
    return router


_DEGRADED = "degraded: its recent requests all timed out"
_DRAINING = "draining: it left the fleet"


def readiness_router(pool: UpstreamPool, store: SessionStore) -> APIRouter:
    router = APIRouter()

    @router.get("/readyz")
    async def readyz() -> JSONResponse:
        probed = pool.upstreams  # the list probed, whatever joins or leaves meanwhile
        reasons = await pool.probe()
        upstreams = [
            {"url": u.url, "up": reasons[u.url] is None, "degraded": u.degraded,
             "reason": reasons[u.url] or (_DEGRADED if u.degraded else None)
             or (_DRAINING if u.draining else None)}
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
