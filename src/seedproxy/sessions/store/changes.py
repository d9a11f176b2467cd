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

__all__ = ["ChangeSignal", "Watch", "Watching", "signal_watch"]


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


class Watching:
    """A ``Watch`` woken when ``woken(step)`` reports a change, or when ``version``
    (read every ``check_s`` seconds, when given: another process's change) moves off
    the version ``seen``."""

    def __init__(
        self, woken: Callable[[float], Awaitable[bool]], version: Callable[[], Awaitable[int]],
        seen: int, check_s: float | None,
    ) -> None:
        self._woken, self._version, self._seen, self._check_s = woken, version, seen, check_s

    async def wait(self, timeout: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            left = max(0.0, deadline - loop.time())
            if await self._woken(left if self._check_s is None else min(left, self._check_s)):
                self._seen = await self._version()
                return
            if loop.time() >= deadline:
                return
            now = await self._version()
            if now != self._seen:
                self._seen = now
                return


@contextlib.asynccontextmanager
async def signal_watch(
    signal: ChangeSignal, version: Callable[[], Awaitable[int]], check_s: float | None
) -> AsyncIterator[Watch]:
    """A ``Watching`` woken by ``signal`` (and by ``version``, when ``check_s`` is given)."""
    waiter = _Waiter()
    with signal._lock:
        signal._waiters.add(waiter)
    try:
        yield Watching(waiter.wait, version, await version() if check_s is not None else 0,
                       check_s)
    finally:
        with signal._lock:
            signal._waiters.discard(waiter)
