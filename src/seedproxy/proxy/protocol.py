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
    """Mixin over a uvicorn HTTP protocol, which keeps these (``cycle.more_body`` drops
    when the body is complete) and calls ``on_response_complete``."""

    cycle: Any
    transport: Any
    loop: Any
    timeout_keep_alive: Any
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
        if self._awaiting_body:
            if not self.cycle.more_body:
                self._deadline = None  # the body is complete
                self._awaiting_body = False
        elif self.cycle is not self._cycle_before:  # a new request's head is complete
            self._awaiting_body = bool(self.cycle.more_body)
            self._deadline = self._from_now() if self._awaiting_body else None

    def on_response_complete(self) -> None:
        super().on_response_complete()  # type: ignore[misc]
        if self.cycle is None or self.cycle.response_complete:  # nothing pipelined
            self._await_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._deadline = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        super().connection_lost(exc)  # type: ignore[misc]

    def _from_now(self) -> float:
        return float(self.loop.time() + self.timeout_keep_alive)

    def _await_head(self) -> None:
        if self.transport.is_closing():
            return
        self._cycle_before = self.cycle
        self._awaiting_body = False
        self._deadline = self._from_now()
        if self._timer is None:
            self._timer = self.loop.call_at(self._deadline, self._check)

    def _check(self) -> None:
        self._timer = None
        deadline = self._deadline
        if deadline is None:
            return  # answering; the next _await_head schedules again
        if self.loop.time() < deadline:
            self._timer = self.loop.call_at(deadline, self._check)
        elif not self.transport.is_closing():
            self._deadline = None
            self.transport.close()


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
