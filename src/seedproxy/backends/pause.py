"""The pause gate: where new upstream-bound requests wait while the fleet is paused.

Invariants:
- Open, ``admit`` returns at once (one attribute read on the hot path).
- Closed, a request waits (it is not failed) until the gate opens, or ``timeout_s``
  passes: then ``FleetPaused``, a 503 with ``Retry-After``.
- The gate is per proxy process and event-loop bound.
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
    """The fleet stayed paused past ``--pause-timeout``."""

    def __init__(self, message: str, *, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s: int | None = retry_after_s


class PauseGate:
    """Holds new requests while paused."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.mode: PauseMode | None = None
        self.waiting = 0
        self.abort_epoch = 0
        """Moves each time the control plane aborts running requests."""
        self._open = asyncio.Event()
        self._open.set()

    @property
    def paused(self) -> bool:
        return not self._open.is_set()

    def close(self, mode: PauseMode) -> None:
        self.mode = mode
        if mode == "abort":
            self.abort_epoch += 1
        self._open.clear()

    def open(self) -> None:
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
