"""uvicorn's HTTP protocols with deadlines on the request head and body.

uvicorn (0.54) times out only idle keep-alive connections after a first response. Here
the head must be complete within ``timeout_keep_alive`` seconds (``--client-timeout``)
of the connection opening or of the previous response, and then the body within as
long again; else the connection is closed (the app sees a disconnect). A request being
answered has no deadline. One timer per connection checks the deadline, re-scheduled
only when it fires early (none is created or cancelled per request).
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["GuardedH11", "guarded_http_protocol"]


class _Deadlines:
    """Mixin over a uvicorn HTTP protocol: both keep ``cycle`` (whose ``more_body``
    drops when the body is complete), ``transport``, ``loop`` and
    ``timeout_keep_alive``, and call ``on_response_complete``."""

    _deadline: float | None = None
    """When the awaited head or body must be complete; None while answering."""
    _timer: asyncio.TimerHandle | None = None
    _cycle_before: Any = None
    """The cycle that was current when the head deadline was set."""
    _awaiting_body = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[misc]
        self._await_head()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)  # type: ignore[misc]
        if self._deadline is None:
            return
        cycle = _proto(self).cycle
        if self._awaiting_body:
            if not cycle.more_body:
                self._deadline = None  # the body is complete
                self._awaiting_body = False
        elif cycle is not self._cycle_before:  # a new request's head is complete
            self._awaiting_body = bool(cycle.more_body)
            self._deadline = self._from_now() if self._awaiting_body else None

    def on_response_complete(self) -> None:
        super().on_response_complete()  # type: ignore[misc]
        cycle = _proto(self).cycle
        if cycle is None or cycle.response_complete:  # nothing pipelined
            self._await_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._deadline = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        super().connection_lost(exc)  # type: ignore[misc]

    def _from_now(self) -> float:
        proto = _proto(self)
        return float(proto.loop.time() + proto.timeout_keep_alive)

    def _await_head(self) -> None:
        proto = _proto(self)
        if proto.transport.is_closing():
            return
        self._cycle_before = proto.cycle
        self._awaiting_body = False
        self._deadline = self._from_now()
        if self._timer is None:
            self._timer = proto.loop.call_at(self._deadline, self._check)

    def _check(self) -> None:
        self._timer = None
        deadline = self._deadline
        if deadline is None:
            return  # answering; the next _await_head schedules again
        proto = _proto(self)
        if proto.loop.time() < deadline:
            self._timer = proto.loop.call_at(deadline, self._check)
        elif not proto.transport.is_closing():
            self._deadline = None
            proto.transport.close()


def _proto(mixin: _Deadlines) -> Any:
    """The uvicorn protocol under the mixin, untyped: its attributes are uvicorn's."""
    return mixin


class GuardedH11(_Deadlines, H11Protocol):
    pass


try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # httptools is optional for uvicorn
    _FASTEST: type[asyncio.Protocol] = GuardedH11
else:

    class GuardedHttpTools(_Deadlines, HttpToolsProtocol):
        pass

    _FASTEST = GuardedHttpTools
    __all__ += ["GuardedHttpTools"]


def guarded_http_protocol() -> type[asyncio.Protocol]:
    """For ``uvicorn.run(http=...)``: httptools when installed, else h11."""
    return _FASTEST
