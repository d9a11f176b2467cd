"""The viewer's routes: the page and its assets (open, they hold no data),
``POST /ui/api/detokenize`` (admin) and ``GET /ui/api/sessions/{id}/turns`` (the admin
key or the session's own); other data comes from the admin routes. Every ``/ui``
response carries a strict Content-Security-Policy: everything from this origin only, no
inline script, no framing, and images also from ``data:`` URLs (no image a client named
by URL is loaded).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any

import orjson
from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from ...errors import BadRequest
from ...fleet.pool import UpstreamPool
from ...pipeline.request import documented
from ...sessions.export import ordered_interactions
from ...sessions.ids import check_id
from ...sessions.store.base import SessionStore
from ..access import Access
from .decode import TokenDecoder
from .turns import MAX_TURNS_PAGE, turns_page

__all__ = ["CSP", "ui_router"]

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
       "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
_SECURITY = {"content-security-policy": CSP, "x-content-type-options": "nosniff",
             "referrer-policy": "no-referrer", "x-frame-options": "DENY",
             "cache-control": "no-store"}
_ASSETS = {"index.html": "text/html; charset=utf-8",
           "app.js": "text/javascript; charset=utf-8", "style.css": "text/css; charset=utf-8"}
MAX_DECODE_IDS = 8192


class DetokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ids: list[int] = Field(max_length=MAX_DECODE_IDS)
    upstream: str | None = Field(default=None, max_length=2048)
    sequence: list[int] | None = Field(default=None, max_length=MAX_DECODE_IDS)
    """Token ids in the order shown: the answer's ``glyphs`` then name its runs of
    byte tokens that decode together (``[start, end, text]``)."""


def _load_assets() -> dict[str, bytes]:
    static = resources.files(__package__).joinpath("static")
    return {name: static.joinpath(name).read_bytes() for name in _ASSETS}


def _asset_route(content: bytes, media_type: str) -> Callable[[], Awaitable[Response]]:
    async def asset() -> Response:
        return Response(content, media_type=media_type, headers=_SECURITY)

    return asset


def ui_router(access: Access, pool: UpstreamPool, decoder: TokenDecoder,
              store: SessionStore) -> APIRouter:
    router = APIRouter()
    assets = _load_assets()

    for path, name in (("/ui", "index.html"), ("/ui/", "index.html"),
                       ("/ui/app.js", "app.js"), ("/ui/style.css", "style.css")):
        router.add_api_route(path, _asset_route(assets[name], _ASSETS[name]),
                             methods=["GET"], include_in_schema=False)

    @router.post("/ui/api/detokenize", openapi_extra=documented(DetokenizeRequest))
    async def detokenize(request: Request) -> JSONResponse:
        """``{ids, upstream?, sequence?}`` -> ``{tokens: {id: text} | null, glyphs?}``;
        ``upstream`` must be one of the proxy's own (default: the first)."""
        body = await access.admin_body(request, DetokenizeRequest)
        known = [u.url for u in pool.upstreams]
        upstream = (body.upstream or known[0]).rstrip("/")
        if upstream not in known:
            raise BadRequest("upstream is not one of this proxy's upstreams", param="upstream")
        sequence = body.sequence
        texts = await decoder.decode(upstream, [*body.ids, *(sequence or [])])
        answer: dict[str, Any] = {
            "tokens": None if texts is None else {str(k): v for k, v in texts.items()}}
        if sequence is not None:
            answer["glyphs"] = [] if texts is None else [
                list(g) for g in await decoder.glyphs(upstream, sequence, texts)]
        return JSONResponse(answer, headers=_SECURITY)

    @router.get("/ui/api/sessions/{session_id}/turns")
    async def turns(
        session_id: str,
        request: Request,
        offset: int = Query(default=0, ge=0, le=10**12),
        limit: int = Query(default=20, ge=1, le=MAX_TURNS_PAGE),
    ) -> Response:
        check_id(session_id, param="session_id")
        record = await access.require_session_reader(request, session_id)
        page = turns_page(await ordered_interactions(store, record), offset, limit)
        return Response(orjson.dumps(page), media_type="application/json",
                        headers=_SECURITY)

    return router
