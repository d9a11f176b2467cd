"""The pool's records: one upstream server's state (``Upstream``), one answer a
server gave (``UpstreamReply``), and where one request is being generated right now
(``Dispatch``), so that it can be stopped.

``server_key`` names the server a URL reaches, however it is spelled.

Invariants: an ``Upstream`` is changed only on the event loop (no lock), by the pool
(with its ``transport.body.Release``) and the fleet's control plane. ``UpstreamReply.response``
stays open (a stream being read) until ``aclose()``, which closes it once however often
it is called.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlsplit

from ..errors import SeedProxyError
from ..transport.body import UpstreamResponse

__all__ = ["Abortable", "Dispatch", "Upstream", "UpstreamReply", "server_key"]

_DEFAULT_PORTS = {"http": 80, "https": 443}
_LOOPBACK_NAMES = frozenset({"localhost", "localhost."})


def server_key(url: str) -> str:
    """What identifies the server at ``url`` (a root URL, checked as ``--upstream`` is):
    its scheme, its host (lower case; ``localhost`` and every loopback address, 127.0.0.0/8
    and ``::1``, are one host), its port (the scheme's default when none is written) and
    its path without a trailing ``/``. Two URLs with one key reach one server on this
    machine; a server reached under two names of other hosts (a DNS name and its address)
    is not recognised."""
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
    """The server's weight version as last reported or set (``FleetControl``)."""
    refused: str | None = None
    """Why the determinism preflight refuses this server (None: it does not)."""
    timeouts: int = 0
    """Requests to it in a row that timed out (its answer, or a free connection to
    it, never came); any answer from it ends the run (a probe does not)."""
    degraded: bool = False
    """Its last ``fails_before_down`` requests all timed out, though it may answer
    ``/health``: ranked after the others, and tried alone (one request at a time,
    when none is in flight) until one is answered."""
    draining: bool = False
    """Left the fleet: no new request goes to it, and it is forgotten once the
    requests it holds are done (``UpstreamPool.set_members``)."""


@dataclass(slots=True)
class UpstreamReply:
    """An upstream's answer. ``response`` is open (streaming) until ``aclose()``."""

    upstream: str
    response: UpstreamResponse
    waited_s: float = 0.0
    failovers: int = 0
    dispatch_weight_version: str | None = None
    """The server's weight version known when the request was sent to it."""
    rid: str | None = None
    """The request's id on that server (SGLang's ``rid``), for ``/abort_request``."""
    parsed: tuple[Any] | None = None
    """The answer's JSON, when a sender already parsed it (so it is parsed once)."""
    _closed: bool = field(default=False, repr=False)

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            await self.response.aclose()


class Abortable(Protocol):
    """Anything naming a request on a server: an ``UpstreamReply`` or a ``Dispatch``."""

    @property
    def upstream(self) -> str | None: ...

    @property
    def rid(self) -> str | None: ...


@dataclass(slots=True)
class Dispatch:
    """Where one upstream request is being generated right now.

    Invariants:
    - The pool writes ``upstream`` and ``rid`` before each attempt is sent (a failover moves
      them); a resubmission after a fleet abort does too. So an abort sent to ``upstream``
      for ``rid`` names the attempt that is running, or one that already ended (harmless).
    - Once ``stop`` was called, no new attempt or resubmission is sent: the pool raises the
      error given instead (the session was deleted, the client left).
    """

    upstream: str | None = None
    rid: str | None = None
    stopped: SeedProxyError | None = None
    """Why no further attempt may be sent (None: it may)."""

    def stop(self, why: SeedProxyError) -> None:
        if self.stopped is None:
            self.stopped = why
