"""A checkpoint for the engine's worker: an ``on_step`` hook that holds the worker thread
once enough running requests have generated ``at`` tokens or more, until the test releases it.
No timing: the test waits on ``held`` and the worker on ``release``."""

from __future__ import annotations

import threading

from seedproxy.engine.generator import GenRequest

__all__ = ["StepHold"]


class StepHold:
    """Pass as ``on_step``; ``arm`` it, wait for ``held``, act, then ``release``."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.at: int | None = None
        self.count = 1
        self.held = threading.Event()
        self._release = threading.Event()
        self.batch: list[tuple[GenRequest, int]] = []
        """The batch when the hold fired."""
        self.steps: list[list[tuple[str, int]]] = []
        """Every step's batch: (rid, tokens so far) of each running request."""

    def arm(self, at: int, count: int = 1) -> None:
        """Hold after the first step where ``count`` running requests have ``at`` tokens
        or more."""
        self.count = count
        self.at = at

    def release(self) -> None:
        self._release.set()

    def __call__(self, batch: list[tuple[GenRequest, int]]) -> None:
        self.steps.append([(req.rid, n) for req, n in batch])
        if self.at is None or sum(1 for _, n in batch if n >= self.at) < self.count:
            return
        self.at = None
        self.batch = list(batch)
        self.held.set()
        if not self._release.wait(timeout=120):
            raise TimeoutError("the test never released the worker")
