"""Upstream servers: sticky routing, health, and failover with the same seed.

Routing is rendezvous hashing on the session id, so a session keeps its server (and
SGLang's prefix cache) while that server is healthy, and adding a server moves only
the sessions that now rank it first. Requests with no session go to the server with
the fewest requests in flight. A request is retried on the next candidate only
before any byte of its answer has reached the client: the body it resends carries
the same seed, so deterministic servers give the same tokens.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from dataclasses import dataclass, field

import httpx
import orjson

from ..errors import UpstreamError, UpstreamTimeout, UpstreamUnavailable
from .base import UpstreamRequest

__all__ = ["Upstream", "UpstreamPool", "UpstreamReply"]

log = logging.getLogger("seedproxy.upstream")

_RETRYABLE_STATUS = frozenset({502, 503})
_FAILS_BEFORE_DOWN = 3


@dataclass(slots=True)
class Upstream:
    url: str
    healthy: bool = True
    failures: int = 0
    inflight: int = 0


@dataclass(slots=True)
class UpstreamReply:
    """An upstream's answer. ``response`` is open (streaming) until ``aclose()``."""

    upstream: str
    response: httpx.Response
    waited_s: float = 0.0
    failovers: int = 0
    _closed: bool = field(default=False, repr=False)

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            await self.response.aclose()


class UpstreamPool:
    """Owns the upstream list and its health; thread-unsafe, event-loop-bound."""

    def __init__(
        self, urls: list[str], client: httpx.AsyncClient, *, max_failover: int = 2
    ) -> None:
        if not urls:
            raise ValueError("at least one upstream URL is required")
        self.upstreams = [Upstream(url.rstrip("/")) for url in urls]
        self.client = client
        self.max_failover = max_failover
        self.failovers = 0

    def candidates(self, key: str | None) -> list[Upstream]:
        """Servers to try, in order: healthy ones first, then the rest."""
        if key is None:
            ranked = sorted(self.upstreams, key=lambda u: u.inflight)
        else:
            ranked = sorted(self.upstreams, key=lambda u: _rank(key, u.url), reverse=True)
        return [u for u in ranked if u.healthy] + [u for u in ranked if not u.healthy]

    async def send(self, request: UpstreamRequest, *, key: str | None, stream: bool) -> UpstreamReply:
        """Send ``request``, failing over on connection errors, timeouts, 502 and 503.

        Returns the first other answer (any status) with its body unread when
        ``stream``; raises ``UpstreamTimeout``, ``UpstreamUnavailable`` or
        ``UpstreamError`` when no server answered.
        """
        content = orjson.dumps(request.body)
        headers = {"content-type": "application/json", **request.headers}
        tried = self.candidates(key)[: self.max_failover + 1]
        last: UpstreamError | None = None
        waited = 0.0
        for attempt, upstream in enumerate(tried):
            started = time.perf_counter()
            upstream.inflight += 1
            try:
                reply = await self._attempt(upstream, request.path, content, headers, stream)
            except UpstreamError as exc:
                last = exc
            else:
                if reply.response.status_code not in _RETRYABLE_STATUS or attempt == len(tried) - 1:
                    self._succeeded(upstream)
                    reply.waited_s = waited + time.perf_counter() - started
                    reply.failovers = attempt
                    return reply
                await reply.aclose()
                last = UpstreamError(
                    f"upstream {upstream.url} answered {reply.response.status_code}",
                    status_code=reply.response.status_code,
                )
            finally:
                upstream.inflight -= 1
            waited += time.perf_counter() - started
            self._failed(upstream)
            if attempt < len(tried) - 1:
                self.failovers += 1
                log.warning("failing over from %s: %s", upstream.url, last)
        assert last is not None
        if len(tried) > 1 and not isinstance(last, UpstreamTimeout):
            raise UpstreamUnavailable(f"all {len(tried)} upstreams failed; last: {last}") from last
        raise last

    async def _attempt(
        self, upstream: Upstream, path: str, content: bytes, headers: dict[str, str], stream: bool
    ) -> UpstreamReply:
        try:
            built = self.client.build_request("POST", upstream.url + path, content=content, headers=headers)
            response = await self.client.send(built, stream=True)
        except httpx.TimeoutException as exc:
            raise UpstreamTimeout(f"upstream {upstream.url} timed out: {type(exc).__name__}") from exc
        except httpx.HTTPError as exc:
            raise UpstreamError(f"upstream {upstream.url} unreachable: {type(exc).__name__}") from exc
        reply = UpstreamReply(upstream.url, response)
        if not stream:
            try:
                await response.aread()
            except httpx.TimeoutException as exc:
                await reply.aclose()
                raise UpstreamTimeout(f"upstream {upstream.url} timed out while answering") from exc
            except httpx.HTTPError as exc:
                await reply.aclose()
                raise UpstreamError(f"upstream {upstream.url} failed while answering") from exc
        return reply

    async def get(self, path: str) -> httpx.Response:
        """GET ``path`` from the first healthy server (for /v1/models)."""
        last: Exception | None = None
        for upstream in self.candidates(None):
            try:
                return await self.client.get(upstream.url + path)
            except httpx.HTTPError as exc:
                last = exc
                self._failed(upstream)
        raise UpstreamUnavailable(f"no upstream answered GET {path}: {last}")

    async def probe(self) -> None:
        """Check every server's /health once; mark it up or down."""
        await asyncio.gather(*(self._probe_one(u) for u in self.upstreams))

    async def _probe_one(self, upstream: Upstream) -> None:
        try:
            response = await self.client.get(upstream.url + "/health", timeout=2.0)
            ok = response.status_code == 200
        except httpx.HTTPError:
            ok = False
        if ok:
            if not upstream.healthy:
                log.info("upstream %s is back", upstream.url)
            self._succeeded(upstream)
        else:
            self._failed(upstream)

    async def probe_forever(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            await self.probe()

    def _succeeded(self, upstream: Upstream) -> None:
        upstream.failures = 0
        upstream.healthy = True

    def _failed(self, upstream: Upstream) -> None:
        upstream.failures += 1
        if upstream.healthy and upstream.failures >= _FAILS_BEFORE_DOWN:
            upstream.healthy = False
            log.warning("upstream %s marked down after %d failures", upstream.url, upstream.failures)


def _rank(key: str, url: str) -> int:
    return int.from_bytes(hashlib.blake2b(f"{key}|{url}".encode(), digest_size=8).digest(), "big")
