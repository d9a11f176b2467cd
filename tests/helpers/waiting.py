"""Waiting on a condition, never on the clock: tests poll what they wait for."""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["HANG_S", "wait_until"]

HANG_S = 1800.0
"""A limit that only catches a hang: a slow step (a CPU engine's request, a training
script) on a loaded 2-core machine may take 5x its time alone, and must still pass."""


def wait_until(condition: Callable[[], bool], timeout_s: float = 60.0) -> None:
    """Return once ``condition()`` holds; ``TimeoutError`` after ``timeout_s`` (a
    generous bound for a stuck test, not a timing assertion)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met")
        time.sleep(0.01)
