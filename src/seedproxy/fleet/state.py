"""The fleet's state: the board's (``FleetState``) and its protocol, imported by both
boards (neither imports the other's module); and the pause gate, where new
upstream-bound requests wait while the fleet is paused.

Invariants of ``PauseGate``:
- Open, ``admit`` returns at once (one attribute read on the hot path).
- Closed, a request waits until the gate opens, or ``timeout_s`` passes: then
  ``FleetPaused``, a 503 with ``Retry-After``.
- One per proxy process, event-loop bound; it mirrors the board's ``FleetState``
  (``FleetControl.apply`` is its only writer), so every replica holds and lets go together.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

from ..errors import UpstreamUnavailable

__all__ = ["FleetBoard", "FleetPaused", "FleetState", "PAUSE_MODES", "PauseGate", "PauseMode"]

PauseMode = Literal["abort", "in_place", "retract"]
PAUSE_MODES: tuple[PauseMode, ...] = ("abort", "in_place", "retract")


@dataclass(frozen=True, slots=True)
class FleetState:
    paused: bool = False
    mode: PauseMode | None = None
    abort_epoch: int = 0
    weight_version: str | None = None
    """The version last set (None: never)."""
    members: tuple[tuple[str, bool], ...] = ()
    """Upstream URLs added (True) or removed (False) at run time, sorted by URL."""
    seq: int = 0
    board: str | None = None

    def newer_than(self, other: FleetState) -> bool:
        return self.board != other.board or self.seq > other.seq

    def members_of(self, startup: list[str]) -> list[str]:
        """``startup`` (a replica's ``--upstream`` list) in order, then those added at run
        time by URL, less those removed: the same on every replica started with the same
        list, whatever order changes arrived in."""
        told = dict(self.members)
        added = [url for url, active in self.members if active and url not in startup]
        return [url for url in startup if told.get(url, True)] + added


class FleetBoard(Protocol):
    async def read(self) -> FleetState: ...

    async def pause(self, mode: PauseMode) -> FleetState:
        """Paused in ``mode``; in ``abort`` mode the epoch moves too."""

    async def resume(self) -> FleetState: ...

    async def abort(self) -> FleetState:
        """Move the epoch: running requests are about to be aborted."""

    async def set_weight_version(self, version: str) -> FleetState: ...

    async def set_member(self, url: str, active: bool) -> FleetState:
        """``url`` joins the fleet (``active``) or leaves it, on every replica."""

    async def begin_sync(self, token: str, what: str, ttl_s: float) -> str | None:
        """Take the weight-sync lock for ``token`` (``what`` describes the sync) for at
        most ``ttl_s``: None when taken, else the holder's ``what``. Atomic on the board."""

    async def end_sync(self, token: str) -> None:
        """Release the weight-sync lock if ``token`` still holds it."""

    async def stop_session(self, session_id: str) -> None:
        """Tell every follower, this one included, to stop ``session_id``'s requests."""

    async def follow(self, apply: Callable[[FleetState], None],
                     stop: Callable[[str], None]) -> None:
        """Call ``apply`` with each state another writer makes, and ``stop`` with each
        session told to stop, until cancelled."""


class FleetPaused(UpstreamUnavailable):
    """The fleet stayed paused past ``--pause-timeout`` (its ``retry_after_s`` given)."""


class PauseGate:
    """Holds new requests while paused."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.mode: PauseMode | None = None
        self.waiting = 0
        self.abort_epoch = 0
        """Moves each time this process learns that the fleet aborted running requests;
        compare it, never order it."""
        self._fleet_epoch = 0
        self._open = asyncio.Event()
        self._open.set()

    @property
    def paused(self) -> bool:
        return not self._open.is_set()

    def apply(self, paused: bool, mode: PauseMode | None, fleet_epoch: int) -> None:
        """Closed with ``mode`` while ``paused``, else open. ``abort_epoch`` moves when
        ``fleet_epoch`` (the board's) differs from the last one applied, so a board that
        restarted from nothing moves it too."""
        if fleet_epoch != self._fleet_epoch:
            self._fleet_epoch = fleet_epoch
            self.abort_epoch += 1
        self.mode = mode if paused else None
        if paused:
            self._open.clear()
        else:
            self._open.set()

    async def admit(self) -> None:
        """Return at once when open; else wait for ``open`` up to the timeout."""
        if self._open.is_set():
            return
        self.waiting += 1
        try:
            await asyncio.wait_for(self._open.wait(), self.timeout_s)
        except TimeoutError:
            raise FleetPaused(
                f"the fleet is paused ({self.mode}) and did not continue within "
                f"{self.timeout_s:g}s",
                retry_after_s=max(1, math.ceil(self.timeout_s)),
            ) from None
        finally:
            self.waiting -= 1
