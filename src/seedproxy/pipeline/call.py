"""The upstream stage's output: what was sent where, the replies, and the time waited.

Invariants:
- Every reply is added the moment it exists and closed exactly once: by ``close``
  when the answer was whole (or failed), by ``close(streamed=True)`` when a stream
  response took them (``take_replies``).
- An upstream that answered >= 400 is an ``UpstreamAnswered``: its status, and its
  message, type and ``param`` (a string of at most ``_PARAM_CHARS``) re-shaped into
  OpenAI's error object.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson

from ..dialects import UpstreamRequest
from ..errors import UpstreamError
from ..fleet.upstream import Dispatch, UpstreamReply
from .context import RequestContext
from .tracing import NO_SPAN, Span

__all__ = ["UpstreamAnswered", "UpstreamCall"]

_PARAM_CHARS = 256


class UpstreamAnswered(UpstreamError):
    """An upstream answered with an error status: its message, type and param kept
    (SGLang's flat shape, OpenAI's, FastAPI's), its status as ``code``."""

    def __init__(self, status: int, content: bytes) -> None:
        try:
            data = orjson.loads(content)
        except orjson.JSONDecodeError:
            data = None
        inner: dict[str, Any] = {}
        if isinstance(data, dict):
            inner = data["error"] if isinstance(data.get("error"), dict) else data
        message, param = inner.get("message") or inner.get("detail"), inner.get("param")
        self.error_type = str(inner.get("type") or "upstream_error")
        if not isinstance(message, str):
            message = content.decode("utf-8", "replace")[:2000] or f"upstream answered {status}"
        if not isinstance(param, str) or len(param) > _PARAM_CHARS:
            param = None
        super().__init__(message, param=param, code=status, status_code=status)


class UpstreamCall:
    __slots__ = ("_span", "ctx", "dispatch_weight_version", "dispatches", "replies",
                 "streaming", "upstream", "upstream_s")

    def __init__(self, ctx: RequestContext) -> None:
        self.ctx = ctx
        self.upstream: str | None = None
        self.dispatch_weight_version: str | None = None
        self.upstream_s = 0.0  # time spent waiting on the upstream
        self.dispatches: list[Dispatch] = []  # where each request is running (inflight.py)
        self.replies: list[UpstreamReply] = []
        self.streaming = False
        self._span: Span = NO_SPAN  # from the first send until the answer is read (end)

    @property
    def session_id(self) -> str | None:
        return self.ctx.session.session_id if self.ctx.session is not None else None

    async def send_all(self, requests: list[UpstreamRequest]) -> list[UpstreamReply]:
        """Send ``requests`` together (one per choice) and fill in where they ran. Raises
        the first ``UpstreamError`` (never answered) or ``UpstreamAnswered`` (an error
        status); the replies are this call's to close either way."""
        ctx = self.ctx
        services = ctx.services
        key = self.session_id
        self._span.end()
        span = self._span = ctx.trace.child("upstream")
        for request in requests:
            span.inject(request.headers)  # the upstream's own spans join the trace
        if services.sender.rids:
            for j, request in enumerate(requests):
                rid = ctx.rid(j)
                if rid is not None and "rid" not in request.body:
                    request.body["rid"] = rid

        async def send(request: UpstreamRequest) -> UpstreamReply:
            dispatch = Dispatch()
            self.dispatches.append(dispatch)
            reply = await services.sender.send(
                request, key=key, stream=ctx.client.stream, dispatch=dispatch)
            self.replies.append(reply)
            return reply

        results: list[UpstreamReply | BaseException]
        if len(requests) == 1:  # no task per request on the common path (bench/compare.py)
            try:
                results = [await send(requests[0])]
            except UpstreamError as exc:
                results = [exc]
        else:
            results = await asyncio.gather(*(send(r) for r in requests), return_exceptions=True)
        replies = [r for r in results if isinstance(r, UpstreamReply)]
        self.upstream = ",".join(dict.fromkeys(r.upstream for r in replies)) or None
        if self.upstream is not None:
            span.set("seedproxy.upstream", self.upstream)
        versions = {r.dispatch_weight_version for r in replies}
        self.dispatch_weight_version = versions.pop() if len(versions) == 1 else None
        self.upstream_s = max((r.waited_s for r in replies),
                              default=time.perf_counter() - ctx.arrived)
        failovers = sum(r.failovers for r in replies)
        if failovers:
            services.metrics.failovers.inc(failovers)
        failure = next((r for r in results if isinstance(r, BaseException)), None)
        if failure is not None:
            raise failure
        bad = next((r for r in replies if r.response.status_code >= 400), None)
        if bad is not None:
            await bad.response.aread()
            raise UpstreamAnswered(bad.response.status_code, bad.response.content)
        return replies

    async def timed(self, chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        """Yield upstream chunks, adding the time spent waiting for them."""
        iterator = aiter(chunks)
        while True:
            started = time.perf_counter()
            chunk = await anext(iterator, None)
            self.upstream_s += time.perf_counter() - started
            if chunk is None:
                return
            yield chunk

    def waited(self, seconds: float) -> None:
        self.upstream_s += seconds

    def end(self) -> None:
        """The answer was read whole (or failed): the upstream span ends."""
        self._span.end()

    def take_replies(self) -> None:
        """A stream response took the replies: it closes them (``close(streamed=True)``)."""
        self.streaming = True

    async def close(self, *, streamed: bool = False) -> None:
        """Close every reply (``streamed``: the stream's, else those no stream took),
        even when closing one raises."""
        self._span.end()
        if streamed or not self.streaming:
            await _close_all(self.replies)


async def _close_all(replies: list[UpstreamReply]) -> None:
    """``aclose`` each reply (idempotent); a failure does not skip the rest."""
    if not replies:
        return
    try:
        await replies[0].aclose()
    finally:
        await _close_all(replies[1:])
