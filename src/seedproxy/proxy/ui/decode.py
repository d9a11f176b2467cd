"""Token ids to text for the viewer, through the upstream's SGLang ``/detokenize``.

The proxy records ids only; the upstream holds the tokenizer. Each distinct id is
decoded on its own (``{"tokens": [id]}`` -> ``{"text": str}``), so a token's text is
exactly what that id decodes to. An upstream without the route (or one that answers
something else) yields None: the viewer then shows ids. Results are cached per decoder,
bounded by ``max_cached``.
"""

from __future__ import annotations

import asyncio

import httpx
import orjson

__all__ = ["TokenDecoder"]


class TokenDecoder:
    def __init__(
        self, client: httpx.AsyncClient, *, concurrency: int = 16, max_cached: int = 200_000
    ) -> None:
        self._client = client
        self._limit = asyncio.Semaphore(concurrency)
        self._cache: dict[tuple[str, int], str] = {}
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

    async def _one(self, upstream: str, token: int) -> str | None:
        async with self._limit:
            try:
                response = await self._client.post(
                    upstream + "/detokenize", json={"tokens": [token]}, timeout=10.0
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
