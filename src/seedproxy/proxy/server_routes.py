"""SGLang's server routes, answered by the fleet: ``/health``, ``/health_generate``,
``/get_model_info``, ``/get_server_info``, ``/tokenize``, ``/v1/tokenize`` and
``/detokenize`` go to the least busy healthy server (the next on a failure), whose
answer is passed on as it came; ``/flush_cache`` goes to every server, answered per
server. With the embedded engine the engine is the fleet.

Invariants:
- Bodies are bounded (413 past ``max_body_bytes``) and must be a JSON object (400)
  before anything is sent.
- ``/health`` and ``/health_generate`` are open, as ``/healthz`` is; the info and token
  routes need what ``/v1/models`` needs; ``/flush_cache`` (it changes every server)
  needs the admin key.
- ``/flush_cache`` is 200 when every server flushed; else 503 when one could not be
  reached, else 400 (SGLang's answer when it does not flush), listing each server.
"""

from __future__ import annotations

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from ..errors import BadRequest
from ..fleet.control import FleetControl
from ..fleet.pool import UpstreamPool
from ..pipeline.request import read_body
from ..transport.body import UpstreamResponse
from .access import Access

__all__ = ["server_router"]

_OPEN = ("/health", "/health_generate")
_INFO = ("/get_model_info", "/get_server_info")
_TOKENS = ("/tokenize", "/v1/tokenize", "/detokenize")


def _passed_on(upstream: UpstreamResponse) -> Response:
    return Response(upstream.content, status_code=upstream.status_code,
                    media_type=upstream.headers.get("content-type"))


def server_router(pool: UpstreamPool, fleet: FleetControl, access: Access, *,
                  max_body_bytes: int) -> APIRouter:
    router = APIRouter()

    async def open_route(request: Request) -> Response:
        return _passed_on(await pool.get(request.url.path))

    async def info_route(request: Request) -> Response:
        await access.session_for(request, None)
        return _passed_on(await pool.get(request.url.path))

    async def token_route(request: Request) -> Response:
        await access.session_for(request, None)
        raw = await read_body(request, max_body_bytes)
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
