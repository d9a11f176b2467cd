"""The parse workers' test seam (``parse_jobs._wait``) from the test's side.

``ParseHold(folder)`` makes the FIFOs ``entered`` and ``release`` there; pass
``str(hold.path)`` as ``create_app(parse_hold=...)``. Each offloaded parse then writes
its worker's pid to ``entered`` and waits on ``release``: ``entered()`` returns that pid
once a worker is inside a parse (a worker holding it cannot move on), ``release()``
lets it go on. Nothing is timed: ``entered`` fails after ``limit_s`` only so that a
broken proxy fails the test instead of hanging it.
"""

from __future__ import annotations

import os
import select
from pathlib import Path

__all__ = ["ParseHold"]


class ParseHold:
    def __init__(self, folder: Path) -> None:
        self.path = folder
        os.mkfifo(folder / "entered")
        os.mkfifo(folder / "release")
        # Open for reading without blocking, and keep it open: a worker's open for
        # writing then never waits. Holding a writer too, a worker that closed its end
        # leaves no hang-up for ``select`` to report: only a pid makes it readable.
        self._entered = os.open(folder / "entered", os.O_RDONLY | os.O_NONBLOCK)
        self._keep = os.open(folder / "entered", os.O_WRONLY | os.O_NONBLOCK)

    def entered(self, limit_s: float = 120) -> int:
        """The pid of the next worker that enters a parse."""
        readable, _, _ = select.select([self._entered], [], [], limit_s)
        assert readable, "no parse worker entered the hold"
        return int(os.read(self._entered, 32))

    def release(self) -> None:
        """Let the worker that ``entered`` last go on (blocks until it waits there)."""
        with open(self.path / "release", "wb") as release:
            release.write(b"x")

    def close(self) -> None:
        os.close(self._keep)
        os.close(self._entered)
