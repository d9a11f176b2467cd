"""Token ids to text for the viewer, through the upstream's SGLang ``/detokenize``.

One call decodes every distinct id not yet cached in one upstream request, each id on
its own (SGLang's batch form), so a token's text is exactly what that id decodes to,
special tokens included; results are cached, bounded by ``max_cached``. An upstream
that cannot decode yields None (the viewer shows ids) and is not asked again for
``retry_after_s``. ``glyphs`` finds the runs of tokens that each decode to U+FFFD (a
character split over byte tokens) and decodes them together in one more request.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import orjson

from ...errors import UpstreamError
from ...transport.client import UpstreamClient

__all__ = ["MAX_GLYPH_TOKENS", "MAX_SPAN_DECODES", "TokenDecoder"]

REPLACEMENT = "\ufffd"
MAX_GLYPH_TOKENS = 8
"""The most tokens one displayed character spans (a UTF-8 character is at most 4 bytes;
an emoji with a modifier, 8)."""
MAX_SPAN_DECODES = 1024
"""Candidate spans decoded per ``glyphs`` call; past them, tokens show one by one."""


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
                         if (start, b) in whole), None)
            if stop is None:
                start += 1
                continue
            out.append((start, stop, whole[(start, stop)]))
            start = stop
        return out

    async def _ask(self, upstream: str, rows: list[list[int]]) -> list[str] | None:
        """One request decoding each row of ids; None unless each came back as text."""
        body = {"tokens": rows, "skip_special_tokens": False}
        try:
            response = await self._client.request("POST", upstream, "/detokenize", json=body,
                                                  timeout=10.0)
        except UpstreamError:
            return None
        if response.status_code != 200:
            return None
        try:
            answer = orjson.loads(response.content)
        except orjson.JSONDecodeError:
            return None
        texts = answer.get("text") if isinstance(answer, dict) else None
        if not (isinstance(texts, list) and len(texts) == len(rows)
                and all(isinstance(text, str) for text in texts)):
            return None
        return texts
