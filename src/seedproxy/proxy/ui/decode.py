"""Token ids to text for the viewer, through the upstream's SGLang ``/detokenize``.

The proxy records ids only; the upstream holds the tokenizer. Each distinct id is
decoded on its own (``{"tokens": [id]}`` -> ``{"text": str}``), so a token's text is
exactly what that id decodes to. An upstream without the route (or one that answers
something else) yields None: the viewer then shows ids. Results are cached per decoder,
bounded by ``max_cached``.

A byte-level tokenizer splits a character (an emoji) over several tokens, each of which
decodes alone to U+FFFD. ``glyphs`` finds those runs in a sequence and decodes each as
one span, so the viewer shows the character once over the tokens that make it.
"""

from __future__ import annotations

import asyncio

import httpx
import orjson

__all__ = ["MAX_GLYPH_TOKENS", "TokenDecoder"]

REPLACEMENT = "\ufffd"
MAX_GLYPH_TOKENS = 8
"""The most tokens one displayed character spans (a UTF-8 character is at most 4 bytes;
an emoji with a modifier, 8)."""
MAX_SPAN_DECODES = 512
"""Span decodes per ``glyphs`` call; past it, the rest of the sequence stays per token."""


class TokenDecoder:
    def __init__(
        self, client: httpx.AsyncClient, *, concurrency: int = 16, max_cached: int = 200_000
    ) -> None:
        self._client = client
        self._limit = asyncio.Semaphore(concurrency)
        self._cache: dict[tuple[str, int], str] = {}
        self._spans: dict[tuple[str, tuple[int, ...]], str | None] = {}
        self._max_cached = max_cached

    async def decode(self, upstream: str, ids: list[int]) -> dict[int, str] | None:
        """Each distinct id's text, or None when ``upstream`` cannot decode."""
        known = {i: self._cache[(upstream, i)] for i in set(ids) if (upstream, i) in self._cache}
        wanted = sorted(set(ids) - known.keys())
        texts = await asyncio.gather(*(self._one(upstream, i) for i in wanted))
        if len(self._cache) + len(wanted) > self._max_cached:
            self._cache.clear()
        for token, text in zip(wanted, texts, strict=True):
            if text is None:
                return None
            self._cache[(upstream, token)] = known[token] = text
        return known

    async def glyphs(self, upstream: str, ids: list[int], texts: dict[int, str]
                     ) -> list[tuple[int, int, str]]:
        """``(start, end, text)`` for each run ``ids[start:end]`` of tokens that decode to
        U+FFFD alone and, together, to text without it: the shortest such run from each
        start, at most ``MAX_GLYPH_TOKENS`` long."""
        out: list[tuple[int, int, str]] = []
        budget = MAX_SPAN_DECODES
        i = 0
        while i < len(ids) and budget > 0:
            found = None
            if REPLACEMENT in texts.get(ids[i], ""):
                for end in range(i + 2, min(len(ids), i + MAX_GLYPH_TOKENS) + 1):
                    if REPLACEMENT not in texts.get(ids[end - 1], "") or budget <= 0:
                        break  # a token that decodes alone ends the run
                    budget -= 1
                    text = await self._span(upstream, tuple(ids[i:end]))
                    if text is not None and REPLACEMENT not in text:
                        found = (i, end, text)
                        break
            if found is None:
                i += 1
            else:
                out.append(found)
                i = found[1]
        return out

    async def _span(self, upstream: str, ids: tuple[int, ...]) -> str | None:
        key = (upstream, ids)
        if key not in self._spans:
            if len(self._spans) >= self._max_cached:
                self._spans.clear()
            self._spans[key] = await self._decode(upstream, list(ids))
        return self._spans[key]

    async def _one(self, upstream: str, token: int) -> str | None:
        return await self._decode(upstream, [token])

    async def _decode(self, upstream: str, tokens: list[int]) -> str | None:
        async with self._limit:
            try:
                response = await self._client.post(
                    upstream + "/detokenize", json={"tokens": tokens}, timeout=10.0
                )
            except httpx.HTTPError:
                return None
        if response.status_code != 200:
            return None
        try:
            body = orjson.loads(response.content)
        except orjson.JSONDecodeError:
            return None
        text = body.get("text") if isinstance(body, dict) else None
        return text if isinstance(text, str) else None
