"""Waiting on a condition, never on the clock: tests poll what they wait for."""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["wait_until"]


def wait_until(condition: Callable[[], bool], timeout_s: float = 60.0) -> None:
    """Return once ``condition()`` holds; ``TimeoutError`` after ``timeout_s`` (a
    generous bound for a stuck test, not a timing assertion)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met")
        time.sleep(0.01)
