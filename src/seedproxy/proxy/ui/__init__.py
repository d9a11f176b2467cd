"""``/ui``: the trajectory viewer, static files plus the small JSON API they need.

The page and its assets are open (they hold no data); ``POST /ui/api/detokenize`` needs
the admin key and ``GET /ui/api/sessions/{id}/turns`` the admin key or the session's
own; other data comes from the admin routes. Every ``/ui`` response carries a strict
Content-Security-Policy: everything from this origin only, no inline script, no
framing, and images also from ``data:`` URLs (no image a client named by URL is loaded).

Token ids become text through the upstream's SGLang ``/detokenize`` (``TokenDecoder``):
one call decodes every distinct id not yet cached in one upstream request, each id on
its own (SGLang's batch form), so a token's text is exactly what that id decodes to,
special tokens included; results are cached, bounded by ``max_cached``. An upstream
that cannot decode yields None (the viewer shows ids) and is not asked again for
``retry_after_s``. ``glyphs`` finds the runs of tokens that each decode to U+FFFD (a
character split over byte tokens) and decodes them together in one more request.

A page of turns shows each turn with only what it added (``turns_page``): the messages
past the history it repeats from the turn before it (``messages_from``: how many). The
turn before is the one it extends (token-in-token-out's ``extends``), else the previous
one in trajectory order; the repeated history is the two message lists' longest common
prefix, plus the assistant message right after it when it is that turn's answer. A turn
that adds nothing past it is shown whole. Each turn carries its ``branch`` and
``prompt`` (extended, matched or rendered); prompt ids are left out (``prompt_tokens``
counts them). Everything else is the trajectory's record of the turn, unchanged.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any

import orjson
from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response
from pydantic import Field

from ...errors import BadRequest, UpstreamError
from ...fleet.pool import UpstreamPool
from ...pipeline.request import documented
from ...sessions.branches import branch_of, is_tito
from ...sessions.codec import conversation
from ...sessions.export import ordered_interactions
from ...sessions.ids import check_id
from ...sessions.interaction import Interaction
from ...sessions.store.base import SessionStore
from ...transport.client import UpstreamClient
from ..access import Access, AdminBody

__all__ = ["CSP", "MAX_GLYPH_TOKENS", "MAX_SPAN_DECODES", "MAX_TURNS_PAGE", "TokenDecoder",
           "turns_page", "ui_router"]

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
       "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
_SECURITY = {"content-security-policy": CSP, "x-content-type-options": "nosniff",
             "referrer-policy": "no-referrer", "x-frame-options": "DENY",
             "cache-control": "no-store"}
_ASSETS = {"index.html": "text/html; charset=utf-8",
           "app.js": "text/javascript; charset=utf-8", "style.css": "text/css; charset=utf-8"}
MAX_DECODE_IDS = 8192
MAX_TURNS_PAGE = 100
REPLACEMENT = "\ufffd"
MAX_GLYPH_TOKENS = 8
"""The most tokens one displayed character spans (a UTF-8 character is at most 4 bytes;
an emoji with a modifier, 8)."""
MAX_SPAN_DECODES = 1024
"""Candidate spans decoded per ``glyphs`` call; past them, tokens show one by one."""


class DetokenizeRequest(AdminBody):
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


class TokenDecoder:
    def __init__(
        self, client: UpstreamClient, *, max_cached: int = 200_000,
        retry_after_s: float = 60.0, clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._cache: dict[tuple[str, int], str] = {}
        self._max_cached = max_cached
        self._retry_after_s = retry_after_s
        self._clock = clock
        self._failed_until: dict[str, float] = {}

    async def decode(self, upstream: str, ids: list[int]) -> dict[int, str] | None:
        """Each distinct id's text, or None when ``upstream`` cannot decode (or could
        not within the last ``retry_after_s``)."""
        if self._failed_until.get(upstream, float("-inf")) > self._clock():
            return None
        distinct = set(ids)
        known = {i: self._cache[(upstream, i)] for i in distinct if (upstream, i) in self._cache}
        wanted = sorted(distinct - known.keys())
        if not wanted:
            return known
        texts = await self._ask(upstream, [[token] for token in wanted])
        if texts is None:
            self._failed_until[upstream] = self._clock() + self._retry_after_s
            return None
        self._failed_until.pop(upstream, None)
        if len(self._cache) + len(wanted) > self._max_cached:
            self._cache.clear()
        for token, text in zip(wanted, texts, strict=True):
            self._cache[(upstream, token)] = known[token] = text
        return known

    async def glyphs(self, upstream: str, ids: list[int], texts: dict[int, str]
                     ) -> list[tuple[int, int, str]]:
        """``(start, end, text)`` for each run ``ids[start:end]`` of tokens that decode to
        U+FFFD alone and together to text without it: from each start the shortest such
        run, at most ``MAX_GLYPH_TOKENS`` long; runs do not overlap. One upstream
        request; none when no token decodes to U+FFFD."""
        broken = [REPLACEMENT in texts.get(token, "") for token in ids]
        spans: list[tuple[int, int]] = []
        for start, bad in enumerate(broken):
            end = start + 1
            while bad and end < min(len(ids), start + MAX_GLYPH_TOKENS) and broken[end] \
                    and len(spans) < MAX_SPAN_DECODES:
                end += 1
                spans.append((start, end))
        if not spans:
            return []
        decoded = await self._ask(upstream, [ids[a:b] for a, b in spans])
        if decoded is None:
            return []
        whole = {span: text for span, text in zip(spans, decoded, strict=True)
                 if REPLACEMENT not in text}
        out: list[tuple[int, int, str]] = []
        start = 0
        while start < len(ids):
            stop = next((b for b in range(start + 2, start + MAX_GLYPH_TOKENS + 1)
                         if (start, b) in whole), start + 1)
            if (start, stop) in whole:
                out.append((start, stop, whole[(start, stop)]))
            start = stop
        return out

    async def _ask(self, upstream: str, rows: list[list[int]]) -> list[str] | None:
        """One request decoding each row of ids; None unless each came back as text."""
        body = {"tokens": rows, "skip_special_tokens": False}
        try:
            response = await self._client.request("POST", upstream, "/detokenize", json=body,
                                                  timeout=10.0)
            answer = orjson.loads(response.content) if response.status_code == 200 else None
        except (UpstreamError, orjson.JSONDecodeError):
            return None
        texts = answer.get("text") if isinstance(answer, dict) else None
        if not (isinstance(texts, list) and len(texts) == len(rows)
                and all(isinstance(text, str) for text in texts)):
            return None
        return texts


def _answers(response: Any) -> list[Any]:
    """The assistant messages a chat answer gave (one per choice)."""
    choices = response.get("choices") if isinstance(response, dict) else None
    if not isinstance(choices, list):
        return []
    return [c.get("message") for c in choices if isinstance(c, dict) and c.get("message")]


def repeated(turn: Interaction, before: Interaction | None) -> int:
    """How many leading messages of ``turn``'s request repeat ``before``'s history."""
    mine = conversation(turn.request)
    theirs = conversation(before.request) if before is not None else None
    if mine is None or theirs is None or mine[0] != theirs[0]:
        return 0
    messages, history = mine[1], theirs[1]
    shared = next((i for i, (a, b) in enumerate(zip(messages, history, strict=False))
                   if a != b), min(len(messages), len(history)))
    if shared == len(history) and shared < len(messages):
        echo = messages[shared]
        answers = _answers(before.response) if before is not None else []
        if isinstance(echo, dict) and echo.get("role") == "assistant" and (
            not answers or any(echo.get("content") == a.get("content") for a in answers
                               if isinstance(a, dict))):
            shared += 1
    return shared if shared < len(messages) else 0


def turns_page(interactions: list[Interaction], offset: int, limit: int) -> dict[str, Any]:
    """``{total, offset, next_offset, turns}`` for ``interactions[offset:offset+limit]``
    (in trajectory order); ``next_offset`` is None on the last page."""
    page = interactions[offset:offset + limit]
    by_id = {i.interaction_id: i for i in interactions}
    branch = branch_of(interactions)[0] if is_tito(interactions) else {}
    turns = []
    for k, turn in enumerate(page, start=offset):
        tito = turn.tito or {}
        extends = tito.get("extends")
        parent = extends.get("interaction_id") if isinstance(extends, dict) else None
        before = by_id.get(parent) if isinstance(parent, str) else None
        if before is None and k > 0:
            before = interactions[k - 1]
        skip = repeated(turn, before)
        shown = {**{key: value for key, value in turn.to_dict().items()
                    if key != "prompt_token_ids"},
                 "prompt_tokens": len(turn.prompt_token_ids), "turn": k, "messages_from": skip}
        if skip:
            name, messages = conversation(turn.request) or ("messages", [])
            shown["request"] = {**turn.request, name: messages[skip:]}
        if branch:
            shown["branch"] = branch.get(turn.interaction_id)
        if isinstance(tito.get("prompt"), dict):
            shown["prompt"] = tito["prompt"]
        turns.append(shown)
    end = offset + len(page)
    return {"total": len(interactions), "offset": offset,
            "next_offset": end if end < len(interactions) else None, "turns": turns}
