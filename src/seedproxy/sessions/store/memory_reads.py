"""The memory store's indexes (``base.View``), activity order and change signal.

Each view is a ``SeqIndex`` kept as sessions change, under the store's lock; the
activity order is an ``OrderedDict`` moved to its end on each request or record, so
the TTL sweep reads the least recently active first (every session shares one TTL,
so activity order is expiry order).

A ``SeqIndex`` gets its ids in increasing sequence order (the store hands out
sequences under its lock), so it is an append-only list searched by bisection; removal
leaves a hole that reads skip, and the list is compacted once holes outnumber entries.
A read costs O(log n + what it returns + holes it crosses), and holes never exceed
entries.
"""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from contextlib import AbstractAsyncContextManager
from itertools import islice

from ..record import SessionRecord
from ..session import Session
from .base import View
from .changes import ChangeSignal, Watch, signal_watch

__all__ = ["MemoryIndexes", "SeqIndex"]


class MemoryIndexes:
    """The memory store's views, activity order and change counter, over its sessions
    and under its lock (both given): the store calls the methods that keep them under
    the lock; the reads take it."""

    def __init__(self, lock: threading.Lock, sessions: Mapping[str, Session]) -> None:
        self._lock, self._sessions = lock, sessions
        self._all = SeqIndex()
        self._groups: dict[str, SeqIndex] = {}
        self._identities: dict[str, SeqIndex] = {}
        self._unexported = SeqIndex()
        self._ready = SeqIndex()
        self._activity: OrderedDict[str, None] = OrderedDict()
        self._version = 0
        self._signal = ChangeSignal()

    def changed(self, *, wake: bool = True) -> None:
        """The listing changed; ``wake``: an export's choice may have too (a session
        created, ended, exported or deleted), so waiting exports look again."""
        self._version += 1
        if wake:
            self._signal.notify()

    def created(self, record: SessionRecord) -> None:
        seq, sid = record.created_seq, record.session_id
        self._all.add(seq, sid)
        if record.group_id is not None:
            self._groups.setdefault(record.group_id, SeqIndex()).add(seq, sid)
        self._identities.setdefault(record.identity, SeqIndex()).add(seq, sid)
        if not record.exported:
            self._unexported.add(seq, sid)
            if record.ended and record.ended_seq is not None:
                self._ready.add(record.ended_seq, sid)
        self._activity[sid] = None
        self.changed()

    def ended(self, session_id: str, ended_seq: int) -> None:
        self._ready.add(ended_seq, session_id)
        self.changed()

    def exported(self, session_id: str) -> None:
        self._unexported.remove(session_id)
        self._ready.remove(session_id)
        self.changed()

    def deleted(self, record: SessionRecord) -> None:
        sid = record.session_id
        _drop(self._groups, record.group_id, sid)
        _drop(self._identities, record.identity, sid)
        for view in (self._all, self._unexported, self._ready):
            view.remove(sid)
        self._activity.pop(sid, None)
        self.changed()

    def touch(self, session_id: str) -> None:
        if session_id in self._activity:
            self._activity.move_to_end(session_id)

    def _view(self, view: View, key: str | None) -> SeqIndex | None:
        if view == "group":
            return self._groups.get(key or "")
        if view == "identity":
            return self._identities.get(key or "")
        return {"all": self._all, "unexported": self._unexported, "ready": self._ready}[view]

    async def scan(
        self, view: View, *, key: str | None = None, after: int = -1, offset: int = 0,
        limit: int,
    ) -> list[SessionRecord]:
        with self._lock:
            index = self._view(view, key)
            if index is None:
                return []
            ids = list(islice(index.after(after), offset, offset + limit))
            return [self._sessions[s].snapshot() for s in ids]

    async def count(self, view: View, *, key: str | None = None) -> int:
        with self._lock:
            index = self._view(view, key)
            return 0 if index is None else len(index)

    async def idle(self, cutoff: float, limit: int) -> list[SessionRecord]:
        found: list[SessionRecord] = []
        with self._lock:
            for session_id in self._activity:
                record = self._sessions[session_id].snapshot()
                if record.last_active_at > cutoff or len(found) >= limit:
                    break
                found.append(record)
        return found

    async def version(self) -> int:
        return self._version

    def watch(self) -> AbstractAsyncContextManager[Watch]:
        return signal_watch(self._signal, self.version, None)


def _drop(table: dict[str, SeqIndex], key: str | None, session_id: str) -> None:
    index = table.get(key) if key is not None else None
    if index is not None:
        index.remove(session_id)
        if not index:
            del table[key]  # type: ignore[arg-type]  # key is not None here


class SeqIndex:
    """Not thread-safe on its own: the memory store calls it under its lock."""

    def __init__(self) -> None:
        self._seqs: list[int] = []
        self._ids: list[str | None] = []
        self._at: dict[str, int] = {}
        self._head = 0
        """Everything before it is a hole (exports take from the front)."""

    def __len__(self) -> int:
        return len(self._at)

    def add(self, seq: int, item: str) -> None:
        if self._seqs and seq <= self._seqs[-1]:
            raise ValueError(f"sequence {seq} is not above {self._seqs[-1]}")
        self.remove(item)
        self._at[item] = len(self._ids)
        self._seqs.append(seq)
        self._ids.append(item)

    def remove(self, item: str) -> None:
        at = self._at.pop(item, None)
        if at is None:
            return
        self._ids[at] = None
        while self._head < len(self._ids) and self._ids[self._head] is None:
            self._head += 1
        if len(self._ids) - self._head > 2 * len(self._at) + 32:
            self._compact()

    def _compact(self) -> None:
        kept = [(s, i) for s, i in zip(self._seqs, self._ids, strict=True) if i is not None]
        self._seqs = [s for s, _ in kept]
        self._ids = [i for _, i in kept]
        self._at = {i: n for n, (_, i) in enumerate(kept)}
        self._head = 0

    def after(self, seq: int) -> Iterator[str]:
        """Ids with a sequence above ``seq``, in order (a live view: consume it under
        the same lock)."""
        ids = self._ids
        for n in range(max(self._head, bisect.bisect_right(self._seqs, seq)), len(ids)):
            item = ids[n]
            if item is not None:
                yield item
