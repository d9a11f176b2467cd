"""Waking a waiting export when the store changes, instead of polling it.

A store keeps a store-wide change ``version`` (bumped by every write a listing or an
export could see: a session created, ended, recorded in, rewarded, exported,
deleted). ``Watch`` is how a task waits for the next change: it is opened *before*
the task reads the store, so a change that lands between the read and the wait
still wakes it (no lost wake-up). In-process changes wake it through ``ChangeSignal``
(safe to notify from any thread); a change made by another process (a second proxy
on one SQLite file) is seen by reading ``version`` every ``check_s`` seconds, an
O(1) read; ``check_s=None`` leaves only the signal (the memory store's case).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Protocol

__all__ = ["ChangeSignal", "Watch", "signal_watch", "wait_changed"]


class Watch(Protocol):
    async def wait(self, timeout: float) -> None:
        """Return once the store changed since the watch began (or since the last
        ``wait`` returned), or after ``timeout`` seconds, whichever comes first."""


class _Waiter:
    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._event = asyncio.Event()

    def wake(self) -> None:
        with contextlib.suppress(RuntimeError):  # its loop closed: nobody waits any more
            self._loop.call_soon_threadsafe(self._event.set)

    async def wait(self, timeout: float) -> bool:
        """True when woken (and re-armed), False on timeout."""
        try:
            await asyncio.wait_for(self._event.wait(), max(0.0, timeout))
        except TimeoutError:
            return False
        self._event.clear()
        return True


class ChangeSignal:
    """The in-process side: ``notify`` wakes every open watch, from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: set[_Waiter] = set()

    def notify(self) -> None:
        with self._lock:
            waiters = list(self._waiters)
        for waiter in waiters:
            waiter.wake()

    @contextlib.asynccontextmanager
    async def _open(self) -> AsyncIterator[_Waiter]:
        waiter = _Waiter()
        with self._lock:
            self._waiters.add(waiter)
        try:
            yield waiter
        finally:
            with self._lock:
                self._waiters.discard(waiter)


class _SignalWatch:
    def __init__(
        self, waiter: _Waiter, version: Callable[[], Awaitable[int]], seen: int,
        check_s: float | None,
    ) -> None:
        self._waiter, self._version, self._seen, self._check_s = waiter, version, seen, check_s

    async def wait(self, timeout: float) -> None:
        self._seen = await wait_changed(self._waiter.wait, self._version, self._seen,
                                        self._check_s, timeout)


async def wait_changed(
    woken: Callable[[float], Awaitable[bool]], version: Callable[[], Awaitable[int]],
    seen: int, check_s: float | None, timeout: float,
) -> int:
    """Wait until ``woken(step)`` reports a change, ``version`` (read every ``check_s``
    seconds, when given: another process's change) moves off ``seen``, or ``timeout``
    passes; return the version seen then."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        left = max(0.0, deadline - loop.time())
        if await woken(left if check_s is None else min(left, check_s)):
            return await version()
        if loop.time() >= deadline:
            return seen
        now = await version()
        if now != seen:
            return now


@contextlib.asynccontextmanager
async def signal_watch(
    signal: ChangeSignal, version: Callable[[], Awaitable[int]], check_s: float | None
) -> AsyncIterator[Watch]:
    """A ``Watch`` woken by ``signal``, and by ``version`` moving (read every
    ``check_s`` seconds, when given)."""
    async with signal._open() as waiter:
        seen = await version() if check_s is not None else 0
        yield _SignalWatch(waiter, version, seen, check_s)
