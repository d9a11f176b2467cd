"""Observing one request: its ``x-seedproxy-*`` headers, metrics, log line and trace end.

Invariants: every answer, error or stream is observed once and carries the same
headers (``headers``). Reads the context and the call; writes nothing of theirs.
"""

from __future__ import annotations

import logging
import time

from ..sessions.ids import encode_id
from .call import UpstreamCall
from .context import RequestContext
from .tracing import Attributes

__all__ = ["Observer"]

log = logging.getLogger("seedproxy.request")


class Observer:
    __slots__ = ("call", "ctx")

    def __init__(self, ctx: RequestContext, call: UpstreamCall) -> None:
        self.ctx = ctx
        self.call = call

    def overhead_ms(self) -> float:
        return max(0.0, (time.perf_counter() - self.ctx.arrived - self.call.upstream_s) * 1000)

    def headers(self) -> dict[str, str]:
        ctx, upstream = self.ctx, self.call.upstream
        headers: dict[str, str] = {}
        if ctx.session is not None:
            headers["x-seedproxy-session"] = encode_id(ctx.session.session_id)
        if ctx.slot is not None:
            headers["x-seedproxy-request-index"] = str(ctx.slot.index)
        if ctx.seeds:
            headers["x-seedproxy-seed"] = ",".join(str(s) for s in ctx.seeds)
        if upstream is not None:
            headers["x-seedproxy-upstream"] = upstream
        headers["x-seedproxy-overhead-ms"] = f"{self.overhead_ms():.3f}"
        if ctx.replayed:
            headers["x-seedproxy-replayed"] = "true"
        return headers

    def observe(self, status: int) -> None:
        """Count the answer, log its line, end its trace."""
        ctx, upstream, upstream_s = self.ctx, self.call.upstream, self.call.upstream_s
        ctx.trace.end(status, self.span_attributes)
        overhead_s = self.overhead_ms() / 1000
        ctx.services.metrics.observe(
            ctx.client.endpoint.value, status, upstream, overhead_s, upstream_s)
        if ctx.services.settings.log_requests and log.isEnabledFor(logging.INFO):
            # log.info() without findCaller's walk up the stack (the record says line 0).
            log.handle(log.makeRecord(
                log.name, logging.INFO, __file__, 0, "request", (), None, "observe",
                extra={
                    "session": ctx.session.session_id if ctx.session else None,
                    "index": ctx.slot.index if ctx.slot else None,
                    "seed": ctx.seeds,
                    "upstream": upstream,
                    "status": status,
                    "proxy_ms": round(overhead_s * 1000, 3),
                    "upstream_ms": round(upstream_s * 1000, 3),
                },
            ))

    def span_attributes(self) -> Attributes:
        """The request span's attributes: where the request ran, and its seeds."""
        ctx = self.ctx
        attributes: dict[str, str | int | list[int]] = {}
        if ctx.seeds:
            attributes["seedproxy.seed"] = ctx.seeds
        if ctx.session is not None:
            attributes["seedproxy.session"] = ctx.session.session_id
            attributes["seedproxy.identity"] = ctx.session.identity
        if ctx.slot is not None:
            attributes["seedproxy.index"] = ctx.slot.index
        if self.call.upstream is not None:
            attributes["seedproxy.upstream"] = self.call.upstream
        return attributes
