"""The pool's records: one upstream server's state (``Upstream``), one answer a server
gave (``UpstreamReply``), and where one request is being generated now (``Dispatch``).

Invariants: an ``Upstream`` is changed only on the event loop (no lock), by the pool
and the fleet's control plane. ``UpstreamReply.response`` stays open (a stream being
read) until ``aclose()``, which closes it once however often it is called.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from ..errors import SeedProxyError
from ..transport.body import UpstreamResponse

__all__ = ["Dispatch", "Upstream", "UpstreamReply", "server_key"]

_DEFAULT_PORTS = {"http": 80, "https": 443}
_LOOPBACK_NAMES = frozenset({"localhost", "localhost."})


def server_key(url: str) -> str:
    """What identifies the server at root URL ``url``: scheme, host (lower case; localhost
    and every loopback address are one host), port (the scheme's default when none is
    written) and path without a trailing ``/``. Two URLs with one key reach one server;
    one server under two names of another host (a DNS name and its address) is not
    recognised."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host in _LOOPBACK_NAMES
    port = parts.port if parts.port is not None else _DEFAULT_PORTS.get(scheme, 0)
    return f"{scheme}://{'loopback' if loopback else host}:{port}{parts.path.rstrip('/')}"


@dataclass(slots=True)
class Upstream:
    url: str
    healthy: bool = True
    failures: int = 0
    inflight: int = 0
    weight_version: str | None = None
    """As last reported or set (``FleetControl``)."""
    refused: str | None = None
    """Why the determinism preflight refuses this server (None: it does not)."""
    timeouts: int = 0
    """Requests to it in a row that timed out (answer or free connection); any answer
    from it ends the run (a probe does not)."""
    degraded: bool = False
    """Its last ``fails_before_down`` requests timed out, though it may answer ``/health``:
    ranked after the others, and tried alone until one is answered."""
    draining: bool = False
    """Left the fleet: takes no new request, forgotten once those it holds are done."""


@dataclass(slots=True)
class UpstreamReply:
    """An upstream's answer. ``response`` is open (streaming) until ``aclose()``."""

    upstream: str
    response: UpstreamResponse
    waited_s: float = 0.0
    failovers: int = 0
    dispatch_weight_version: str | None = None
    """The server's weight version when the request was sent to it."""
    rid: str | None = None
    """The request's id on that server (SGLang's ``rid``), for ``/abort_request``."""
    parsed: tuple[Any] | None = None
    """The answer's JSON, when a sender already parsed it (parsed once)."""
    _closed: bool = field(default=False, repr=False)

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            await self.response.aclose()


@dataclass(slots=True)
class Dispatch:
    """Where one upstream request is being generated right now.

    Invariants: ``upstream`` and ``rid`` are written before each attempt (or resubmission
    after a fleet abort) is sent, so an abort names the running attempt or one that
    already ended (harmless). Once ``stop`` was called no new attempt or resubmission is
    sent: the pool raises the error given instead.
    """

    upstream: str | None = None
    rid: str | None = None
    stopped: SeedProxyError | None = None

    def stop(self, why: SeedProxyError) -> None:
        if self.stopped is None:
            self.stopped = why
