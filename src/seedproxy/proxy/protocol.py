"""uvicorn's HTTP protocols with a deadline on the request head.

uvicorn (0.54) times out only idle keep-alive connections, and only after a first
response: a client that opens a connection and sends nothing, or half a request
head, a byte now and then, holds it (and a file descriptor) for good. Here the head
must be complete within ``timeout_keep_alive`` seconds of the connection opening or
of the previous response, else the connection is closed (``serve`` sets that
timeout from ``--client-timeout``). Bodies have their own deadline, the same value,
in ``request.read_body``; a request being answered has none.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["GuardedH11", "guarded_http_protocol"]


class _HeadDeadline:
    """Mixin over a uvicorn HTTP protocol: both keep ``cycle``, ``transport``, ``loop``
    and ``timeout_keep_alive``, and call ``on_response_complete``."""

    _head_timer: asyncio.TimerHandle | None = None
    _cycle_before: Any = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[misc]
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)  # type: ignore[misc]
        if self._head_timer is not None and _proto(self).cycle is not self._cycle_before:
            self._disarm()  # a new request's head is complete

    def on_response_complete(self) -> None:
        super().on_response_complete()  # type: ignore[misc]
        cycle = _proto(self).cycle
        if cycle is None or cycle.response_complete:  # nothing pipelined
            self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)  # type: ignore[misc]

    def _arm(self) -> None:
        self._disarm()
        proto = _proto(self)
        if proto.transport.is_closing():
            return
        self._cycle_before = proto.cycle
        self._head_timer = proto.loop.call_later(proto.timeout_keep_alive, self._head_too_slow)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_too_slow(self) -> None:
        self._head_timer = None
        transport = _proto(self).transport
        if not transport.is_closing():
            transport.close()


def _proto(mixin: _HeadDeadline) -> Any:
    """The uvicorn protocol under the mixin, untyped: its attributes are uvicorn's."""
    return mixin


class GuardedH11(_HeadDeadline, H11Protocol):
    pass


try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # httptools is optional for uvicorn
    _FASTEST: type[asyncio.Protocol] = GuardedH11
else:

    class GuardedHttpTools(_HeadDeadline, HttpToolsProtocol):
        pass

    _FASTEST = GuardedHttpTools
    __all__ += ["GuardedHttpTools"]


def guarded_http_protocol() -> type[asyncio.Protocol]:
    """The protocol class for ``uvicorn.run(http=...)``: httptools when installed
    (as uvicorn's ``auto`` picks), else h11, with the head deadline."""
    return _FASTEST
