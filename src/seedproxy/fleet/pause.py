"""The pause gate: where new upstream-bound requests wait while the fleet is paused.

Invariants:
- Open, ``admit`` returns at once (one attribute read on the hot path).
- Closed, a request waits (it is not failed) until the gate opens, or ``timeout_s``
  passes: then ``FleetPaused``, a 503 with ``Retry-After``.
- The gate is event-loop bound, one per proxy process, and it mirrors the fleet's
  shared state (``board.py``): ``FleetControl.apply`` is its only writer, so every
  replica on one board holds and lets go together.
"""

from __future__ import annotations

import asyncio
import math
from typing import Literal

from ..errors import UpstreamUnavailable

__all__ = ["PAUSE_MODES", "FleetPaused", "PauseGate", "PauseMode"]

PauseMode = Literal["abort", "in_place", "retract"]
PAUSE_MODES: tuple[PauseMode, ...] = ("abort", "in_place", "retract")


class FleetPaused(UpstreamUnavailable):
    """The fleet stayed paused past ``--pause-timeout`` (its ``retry_after_s`` given)."""


class PauseGate:
    """Holds new requests while paused."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.mode: PauseMode | None = None
        self.waiting = 0
        self.abort_epoch = 0
        """Moves each time this process learns that the fleet's control plane (here
        or on another replica) aborted running requests; compare it, never order it."""
        self._fleet_epoch = 0
        self._open = asyncio.Event()
        self._open.set()

    @property
    def paused(self) -> bool:
        return not self._open.is_set()

    def apply(self, paused: bool, mode: PauseMode | None, fleet_epoch: int) -> None:
        """Take the fleet's state: closed with ``mode`` while ``paused``, else open.
        ``abort_epoch`` moves when ``fleet_epoch`` (the board's count of aborts) differs
        from the last one applied, so a board that restarted from nothing moves it too."""
        if fleet_epoch != self._fleet_epoch:
            self._fleet_epoch = fleet_epoch
            self.abort_epoch += 1
        if paused:
            self.mode = mode
            self._open.clear()
        else:
            self.mode = None
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
