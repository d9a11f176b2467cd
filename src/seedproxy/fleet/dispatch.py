"""Where one upstream request is being generated right now, so that it can be stopped.

Invariants:
- The pool writes ``upstream`` and ``rid`` before each attempt is sent (a failover moves
  them); a resubmission after a fleet abort does too. So an abort sent to ``upstream``
  for ``rid`` names the attempt that is running, or one that already ended (harmless).
- Once ``stop`` was called, no new attempt or resubmission is sent: the pool raises the
  error given instead (the session was deleted, the client left).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ..errors import SeedProxyError

__all__ = ["Abortable", "Dispatch"]


class Abortable(Protocol):
    """Anything naming a request on a server: an ``UpstreamReply`` or a ``Dispatch``."""

    @property
    def upstream(self) -> str | None: ...

    @property
    def rid(self) -> str | None: ...


@dataclass(slots=True)
class Dispatch:
    upstream: str | None = None
    rid: str | None = None
    stopped: SeedProxyError | None = None
    """Why no further attempt may be sent (None: it may)."""

    def stop(self, why: SeedProxyError) -> None:
        if self.stopped is None:
            self.stopped = why
