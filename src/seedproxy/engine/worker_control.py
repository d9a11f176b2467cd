"""The worker's control plane, called from any thread: pause and continue (SGLang's
three modes), abort, the weight-version label, weight swaps and cache flushes.

Invariants: each call only sets state under the worker's lock (``_cv``) and wakes the
worker; none waits for a step to end (``load_weights`` and ``flush_cache`` await the
worker thread's answer on the caller's event loop). One swap is pending at a time; a
flush asked while requests run or wait is refused at once.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sized
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from .reload import PreparedWeights

__all__ = ["PAUSE_MODES", "PauseMode", "PendingSwap", "WorkerControl"]

PauseMode = Literal["abort", "in_place", "retract"]
PAUSE_MODES: tuple[PauseMode, ...] = ("abort", "in_place", "retract")


@dataclass
class PendingSwap:
    """Weights asked for by ``load_weights``, waiting for the worker to swap them in."""

    prepared: PreparedWeights
    version: str | None
    done: Callable[[int | None], None]
    """Called on the worker thread: how many requests were held paused across the swap,
    or None when the worker stopped first."""


def _answer() -> tuple[asyncio.Future[Any], Callable[[Any], None]]:
    """A future on the running loop, and the function that sets it from another thread."""
    loop = asyncio.get_running_loop()
    result: asyncio.Future[Any] = loop.create_future()

    def done(value: Any) -> None:
        try:
            loop.call_soon_threadsafe(result.set_result, value)
        except RuntimeError:  # the loop is gone: nobody waits for the answer
            pass

    return result, done


class WorkerControl:
    """The controls of ``Worker`` (a mixin over the state its ``__init__`` sets)."""

    if TYPE_CHECKING:  # what Worker provides
        weight_version: str
        _cv: threading.Condition
        _waiting: Sized
        _paused: PauseMode | None
        _poked: bool
        _live: dict[str, threading.Event]
        _swap: PendingSwap | None
        _flushes: list[Callable[[bool], None]]
        _busy: bool

    @property
    def paused(self) -> PauseMode | None:
        return self._paused

    @property
    def waiting(self) -> int:
        """Requests queued and not admitted (parked ones included)."""
        return len(self._waiting)

    def pause(self, mode: PauseMode) -> None:
        """Stop stepping before the next step; in ``abort`` mode every request running or
        queued now is cancelled. Returns at once."""
        with self._cv:
            self._paused = mode
            self._poked = True
            self._cv.notify_all()
        if mode == "abort":
            self.abort(None)

    def resume(self) -> None:
        with self._cv:
            self._paused = None
            self._cv.notify_all()

    def set_weight_version(self, version: str, *, abort_all: bool) -> None:
        """Label the tokens sampled from now on ``version``; with ``abort_all`` every
        request running or queued ends with ``finish_reason`` abort."""
        with self._cv:
            self.weight_version = version
        if abort_all:
            self.abort(None)

    async def load_weights(self, prepared: PreparedWeights, version: str | None) -> int | None:
        """Swap in ``prepared`` (and label tokens ``version`` from then, when given) at
        the worker's next chance; return how many requests were held paused across the
        swap, or None when the worker stopped first."""
        result, done = _answer()
        with self._cv:
            if self._swap is not None:
                raise RuntimeError("a weight swap is already pending")
            self._swap = PendingSwap(prepared, version, done)
            self._poked = True
            self._cv.notify_all()
        held: int | None = await result
        return held

    async def flush_cache(self) -> bool:
        """Empty the prefix cache at the worker's next chance; False (and nothing done)
        when requests are running or waiting then."""
        result, done = _answer()
        with self._cv:
            if self._busy or self._waiting:  # answered now: a held step cannot delay it
                return False
            self._flushes.append(done)
            self._poked = True
            self._cv.notify_all()
        return bool(await result)

    def abort(self, rid: str | None) -> int:
        """Cancel the running or queued requests named ``rid`` (a request's own rid, or
        the base of its ``rid-i`` choices); every one when ``rid`` is None. Returns how
        many were told; each ends with ``finish_reason`` abort at its next step."""
        told = 0
        for name, flag in list(self._live.items()):
            if rid is None or name == rid or name.startswith(rid + "-"):
                flag.set()
                told += 1
        with self._cv:  # a paused worker ends them now
            self._poked = True
            self._cv.notify_all()
        return told
