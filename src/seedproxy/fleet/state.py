"""The fleet board's state and protocol, shared by ``board.py`` (the local board and
``open_board``) and ``redis_board.py``: both import this module, neither the other's
(``open_board`` imports ``redis_board`` when it needs it), so there is no cycle."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from .pause import PauseMode

__all__ = ["FleetBoard", "FleetState"]


@dataclass(frozen=True, slots=True)
class FleetState:
    paused: bool = False
    mode: PauseMode | None = None
    abort_epoch: int = 0
    weight_version: str | None = None
    """The version last set through ``/fleet/weight_version`` (None: never)."""
    members: tuple[tuple[str, bool], ...] = ()
    """Upstream URLs added (True) or removed (False) at run time, sorted by URL; they
    override every replica's ``--upstream`` list (``members_of``)."""
    seq: int = 0
    board: str | None = None

    def newer_than(self, other: FleetState) -> bool:
        return self.board != other.board or self.seq > other.seq

    def members_of(self, startup: list[str]) -> list[str]:
        """The fleet's upstreams: ``startup`` (a replica's ``--upstream`` list) in its
        order, then those added at run time by URL, less those removed. The same on
        every replica started with the same list, whatever order changes arrived in."""
        told = dict(self.members)
        added = [url for url, active in self.members if active and url not in startup]
        return [url for url in startup if told.get(url, True)] + added


class FleetBoard(Protocol):
    async def read(self) -> FleetState: ...

    async def pause(self, mode: PauseMode) -> FleetState:
        """Paused in ``mode``; in ``abort`` mode the epoch moves too."""
        ...

    async def resume(self) -> FleetState: ...

    async def abort(self) -> FleetState:
        """Move the epoch: running requests are about to be aborted."""
        ...

    async def set_weight_version(self, version: str) -> FleetState: ...

    async def set_member(self, url: str, active: bool) -> FleetState:
        """``url`` joins the fleet (``active``) or leaves it, on every replica."""
        ...

    async def begin_sync(self, token: str, what: str, ttl_s: float) -> str | None:
        """Take the fleet's weight-sync lock for ``token`` (``what`` describes the sync),
        held at most ``ttl_s``: None when taken, else the ``what`` of the sync holding it.
        Atomic on the board: of two concurrent callers exactly one gets None."""
        ...

    async def end_sync(self, token: str) -> None:
        """Release the weight-sync lock if ``token`` still holds it."""
        ...

    async def stop_session(self, session_id: str) -> None:
        """Tell every follower to stop ``session_id``'s requests in flight."""
        ...

    async def follow(self, apply: Callable[[FleetState], None],
                     stop: Callable[[str], None]) -> None:
        """Call ``apply`` with each state another writer makes, and ``stop`` with each
        session told to stop, until cancelled."""
        ...
