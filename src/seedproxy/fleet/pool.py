"""Upstream servers: sticky routing, health, and failover with the same seed.

Routing is rendezvous hashing on the session id, so a session keeps its server (and
SGLang's prefix cache) while that server is healthy, and adding a server moves only
the sessions that now rank it first (removing one, only the sessions it held). Requests
with no session go to the server with the fewest requests in flight (ties taken in turn).
A request is retried on the next candidate only before any byte of its answer reached
the client: a streamed answer's first chunk is read here, before the reply is handed
on, so a server that dies before its first token is failed over too. The body resent
is the same bytes, with the same seed.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
import time
from collections.abc import Callable
from typing import TypeVar

import orjson

from ..errors import UpstreamError, UpstreamTimeout, UpstreamUnavailable
from ..sessions.token_ids import orjson_default
from ..transport.body import Release, UpstreamResponse, prime
from ..transport.client import UpstreamClient
from ..transport.failure import NoConnection, cause
from ..transport.loop import LOOP_STATUS, LOOPED, is_loop
from ..wire.types import UpstreamRequest
from .state import PauseGate
from .upstream import Dispatch, Upstream, UpstreamReply, server_key

__all__ = ["NoConnection", "UpstreamPool", "rendezvous_order"]

log = logging.getLogger("seedproxy.upstream")

_RETRYABLE_STATUS = frozenset({502, 503, LOOP_STATUS})  # a loop: that server is this proxy

T = TypeVar("T")


class UpstreamPool:
    """Owns the upstream list and its health; event-loop-bound.

    A server is down after ``fails_before_down`` consecutive failures (requests or
    probes) and back at the first success. Down servers stay last in every candidate
    list, so a request still reaches one when nothing else answers. A degraded server
    (``Upstream.degraded``) ranks after the healthy ones, unless it has nothing in
    flight: then the next request tests it.
    """

    fails_before_down = 3
    probe_timeout_s = 2.0

    def __init__(self, urls: list[str], client: UpstreamClient, *, max_failover: int = 2,
                 gate: PauseGate | None = None) -> None:
        if not urls:
            raise ValueError("at least one upstream URL is required")
        self.upstreams = [Upstream(url.rstrip("/")) for url in urls]
        """Draining ones included; replaced, never changed in place, so a loop over it
        that awaits still sees one list."""
        self.client = client
        self.max_failover = max_failover
        self.failovers = 0
        self.gate = gate
        self._turn = 0

    def find(self, url: str) -> Upstream | None:
        """The upstream at ``url``, however it is spelled (``server_key``)."""
        key = server_key(url)
        return next((u for u in self.upstreams if server_key(u.url) == key), None)

    def set_members(self, urls: list[str], *, weight_version: str | None) -> None:
        """Make ``urls`` the fleet: a new one joins (at ``weight_version``, the fleet's),
        a draining one that is named again takes requests again, and one not named
        drains (forgotten at once when it holds none)."""
        wanted = set(urls)
        kept: list[Upstream] = []
        for upstream in self.upstreams:
            if upstream.url in wanted:
                upstream.draining = False
            elif not upstream.draining:
                upstream.draining = True
                log.info("upstream %s is draining (%d in flight)", upstream.url,
                         upstream.inflight)
            if upstream.inflight or not upstream.draining:
                kept.append(upstream)
        known = {u.url for u in kept}
        for url in urls:
            if url not in known:
                kept.append(Upstream(url, weight_version=weight_version))
                log.info("upstream %s joined the fleet", url)
        self.upstreams = kept

    def _done(self, upstream: Upstream, broken: bool) -> None:
        """One of ``upstream``'s requests is done: forget it if it drained."""
        upstream.inflight -= 1
        if broken:
            self._failed(upstream)
        if upstream.draining and not upstream.inflight:
            self.upstreams = [u for u in self.upstreams if u is not upstream]
            log.info("upstream %s drained and left the fleet", upstream.url)

    def candidates(self, key: str | None) -> list[Upstream]:
        """Servers to try, in order: healthy ones first, then the rest; never one
        refused by the preflight or draining."""
        serving = [u for u in self.upstreams if u.refused is None and not u.draining]
        if len(serving) <= 1:  # no ranking to do (nor hashing)
            return serving
        if key is None:  # fewest in flight, ties from the server whose turn it is
            turn = self._turn % len(serving)
            self._turn = (turn + 1) % len(serving)
            ranked = sorted(serving[turn:] + serving[:turn], key=lambda u: u.inflight)
        else:
            ranked = rendezvous_order(key, serving, lambda u: u.url)
        return sorted(ranked, key=_standing)  # stable: the ranking within each standing

    async def send(
        self, request: UpstreamRequest, *, key: str | None, stream: bool,
        dispatch: Dispatch | None = None,
    ) -> UpstreamReply:
        """Send ``request``, failing over on connection errors, timeouts, 502 and 503.

        Returns the first other answer (any status); when ``stream`` its first chunk
        has been read. Raises ``UpstreamUnavailable`` (503) when every server tried
        failed, or the single server's error: ``NoConnection`` (503, none of its
        connections came free), ``UpstreamTimeout`` (504), else ``UpstreamError`` (502).
        A timeout of either kind counts toward degradation; only a server that was
        reached counts as failed. Waits at the gate first while the fleet is paused.
        ``dispatch`` names the attempt being sent; once stopped, its error is raised.
        """
        if self.gate is not None:
            await self.gate.admit()
        content = orjson.dumps(request.body, default=orjson_default)
        headers = {"content-type": "application/json", **request.headers}
        tried = self.candidates(key)[: self.max_failover + 1]
        if not tried:
            reasons = "; ".join(u.refused or "" for u in self.upstreams)
            raise UpstreamUnavailable(f"no upstream passes the determinism preflight: {reasons}")
        last: UpstreamError | None = None
        waited = 0.0
        rid = request.body.get("rid")
        rid = rid if isinstance(rid, str) else None
        for attempt, upstream in enumerate(tried):
            if upstream.draining:  # left the fleet while an earlier one was tried
                continue
            started = time.perf_counter()
            final = attempt == len(tried) - 1
            if dispatch is not None:
                if dispatch.stopped is not None:
                    raise dispatch.stopped
                dispatch.upstream, dispatch.rid = upstream.url, rid
            try:
                reply = await self._attempt(upstream, request.path, content, headers, stream)
                reply.rid = rid
            except UpstreamError as exc:
                last = exc
                if isinstance(exc, UpstreamTimeout | NoConnection):
                    self._timed_out(upstream)
            else:
                self._answered(upstream)
                status = reply.response.status_code
                retryable = status in _RETRYABLE_STATUS
                if not retryable or len(tried) == 1:
                    (self._failed if retryable else self._succeeded)(upstream)
                    reply.waited_s = waited + time.perf_counter() - started
                    reply.failovers = attempt
                    return reply
                await reply.aclose()
                last = UpstreamError(f"upstream {upstream.url} answered {status}",
                                     status_code=status)
            waited += time.perf_counter() - started
            if not isinstance(last, NoConnection):  # NoConnection: never reached it
                self._failed(upstream)
            if not final:
                self.failovers += 1
                log.warning("failing over from %s: %s", upstream.url, last)
        assert last is not None
        if len(tried) > 1:
            raise UpstreamUnavailable(
                f"all {len(tried)} upstreams failed; last: {last.message}"
            ) from last
        raise last

    async def _attempt(
        self, upstream: Upstream, path: str, content: bytes, headers: dict[str, str], stream: bool
    ) -> UpstreamReply:
        """One try on one server. ``inflight`` counts it until its body is read here, or
        (a stream) until the reply is closed; on an error or a cancellation the answer
        is closed and the count released here."""
        upstream.inflight += 1
        version = upstream.weight_version
        release = Release(functools.partial(self._done, upstream))
        response: UpstreamResponse | None = None
        try:
            response = await self.client.post_stream(upstream.url, path, content, headers)
            if stream and response.status_code < 400:
                await prime(response, release)  # the reply's aclose() releases from now on
                return UpstreamReply(upstream.url, response, dispatch_weight_version=version)
            await response.aread()
            release(broken=False)
            return UpstreamReply(upstream.url, response, dispatch_weight_version=version,
                                 _closed=True)  # read and released
        except BaseException:
            try:
                if response is not None:
                    await response.aclose()
            finally:
                release(broken=False)
            raise

    async def get(self, path: str, *, method: str = "GET",
                  body: bytes | None = None) -> UpstreamResponse:
        """``method`` ``path`` (with JSON ``body``) on the least busy healthy server that
        answers (for /v1/models and SGLang's server routes), the next on a failure."""
        last: BaseException | None = None
        response: UpstreamResponse | None = None
        headers = {"content-type": "application/json"} if body is not None else None
        for upstream in self.candidates(None):
            try:
                response = await self.client.request(method, upstream.url, path,
                                                      content=body, headers=headers)
            except UpstreamError as exc:
                last = cause(exc)
                self._failed(upstream)
                continue
            if response.status_code not in _RETRYABLE_STATUS:
                return response
        if response is not None:
            return response
        raise UpstreamUnavailable(
            f"no upstream answered {method} {path}: {type(last).__name__}")

    async def abort(self, request: UpstreamReply | Dispatch) -> None:
        """Ask the server that holds ``request`` to stop generating it (SGLang's
        ``/abort_request``); best effort: a failure is logged, never raised."""
        rid, upstream = request.rid, request.upstream
        if rid is None or upstream is None:
            return
        try:
            await self.client.request("POST", upstream, "/abort_request", json={"rid": rid},
                                      timeout=self.probe_timeout_s)
        except UpstreamError as exc:
            log.warning("could not abort %s on %s: %s", rid, upstream,
                        type(cause(exc)).__name__)

    async def probe(self) -> dict[str, str | None]:
        """Check every server's /health once, marking it up or down: per URL, None when
        it is up, else why not."""
        upstreams = self.upstreams
        reasons = await asyncio.gather(*(self._probe_one(u) for u in upstreams))
        return {u.url: reason for u, reason in zip(upstreams, reasons, strict=True)}

    async def check(self, url: str) -> str | None:
        """``probe`` for a server not in the fleet: None when it is up, else why not."""
        return await self._probe_one(Upstream(url))

    async def _probe_one(self, upstream: Upstream) -> str | None:
        try:
            response = await self.client.request("GET", upstream.url, "/health",
                                                 timeout=self.probe_timeout_s)
            # Below 500 is up: a server may have no /health (404); SGLang answers 503 sick.
            status = response.status_code
            reason = (LOOPED if is_loop(response) else None if status < 500
                      else f"/health answered {status}")
        except UpstreamError as exc:
            inner = cause(exc)
            reason = f"{type(inner).__name__}: {inner}" if str(inner) else type(inner).__name__
        (self._succeeded if reason is None else self._failed)(upstream)
        return reason

    async def probe_forever(self, interval_s: float) -> None:
        """Probe every ``interval_s`` until cancelled, while there are two servers or
        more; a probe's own bug is logged, never ends the loop (servers would stay down)."""
        while True:
            await asyncio.sleep(interval_s)
            if len(self.upstreams) < 2:
                continue
            try:
                await self.probe()
            except Exception:
                log.exception("health probe failed")

    def _timed_out(self, upstream: Upstream) -> None:
        upstream.timeouts += 1
        if not upstream.degraded and upstream.timeouts >= self.fails_before_down:
            upstream.degraded = True
            log.warning("upstream %s degraded: its last %d requests timed out",
                        upstream.url, upstream.timeouts)

    def _answered(self, upstream: Upstream) -> None:
        if upstream.degraded:
            log.info("upstream %s answers again", upstream.url)
        upstream.timeouts = 0
        upstream.degraded = False

    def _succeeded(self, upstream: Upstream) -> None:
        if not upstream.healthy:
            log.info("upstream %s is back", upstream.url)
        upstream.failures = 0
        upstream.healthy = True

    def _failed(self, upstream: Upstream) -> None:
        upstream.failures += 1
        if upstream.healthy and upstream.failures >= self.fails_before_down:
            upstream.healthy = False
            log.warning("upstream %s marked down after %d failures", upstream.url,
                        upstream.failures)


def _standing(upstream: Upstream) -> int:
    """0 healthy, 1 degraded (unless idle: then it is tested), 2 down."""
    if not upstream.healthy:
        return 2
    return 1 if upstream.degraded and upstream.inflight else 0


def rendezvous_order(key: str, items: list[T], url: Callable[[T], str]) -> list[T]:
    """``items`` by descending rendezvous score of (key, url): stable across processes
    and runs, and adding an item moves only the keys that now rank it first."""
    return sorted(items, key=lambda item: _score(key, url(item)), reverse=True)


def _score(key: str, url: str) -> int:
    return int.from_bytes(hashlib.blake2b(f"{key}|{url}".encode(), digest_size=8).digest(), "big")

