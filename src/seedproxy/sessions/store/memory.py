"""The in-process store: fast, single-process, lost on restart; and its indexes
(``base.View``), activity order and change signal (``MemoryIndexes``).

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
import builtins
import itertools
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from contextlib import AbstractAsyncContextManager
from itertools import islice

from ...errors import SessionNotFound
from ..codec import Link, Sent
from ..interaction import Interaction
from ..record import Recorded, SessionRecord, Slot, Stale
from ..session import Session
from .base import RETRY_MEMORY, View, over_capacity
from .changes import ChangeSignal, Watch, signal_watch
from .leases import MemoryLeases

__all__ = ["MemoryIndexes", "MemoryStore", "SeqIndex"]


class MemoryStore:
    """``SessionStore`` over a dict of ``Session`` objects. Safe across threads;
    not shared across processes (use Redis for several workers or replicas). Export
    leases are kept in memory too (``leases.py``), and so are the indexes that pages,
    exports and the TTL sweep read (``MemoryIndexes``), each changed under the
    store's lock."""

    def __init__(self, *, retry_memory: int = RETRY_MEMORY) -> None:
        self._sessions: dict[str, Session] = {}
        self._by_key: dict[str, str] = {}
        self._lock = threading.Lock()
        self._created = itertools.count()
        self._ended = itertools.count()
        self._open: set[str] = set()
        """Ids of sessions not ended, kept as they change: ``count_open`` is O(1)."""
        self._retry_memory = retry_memory
        self._epoch = secrets.token_hex(8)  # each process's store starts from nothing
        self._leases = leases = MemoryLeases(self._lock, self._sessions)
        self._indexes = reads = MemoryIndexes(self._lock, self._sessions)
        self.lease, self.held_until = leases.lease, leases.held_until
        self.scan, self.count, self.idle = reads.scan, reads.count, reads.idle
        self.version, self.watch = reads.version, reads.watch

    def _session(self, session_id: str, created_seq: int | None = None) -> Session:
        session = self._sessions.get(session_id)
        if session is None or created_seq not in (None, session.created_seq):
            raise SessionNotFound(f"session {session_id!r} not found")
        return session

    async def create(
        self, record: SessionRecord, *, max_open: int | None = None, reserve: int = 1
    ) -> bool:
        with self._lock:
            if record.session_id in self._sessions:
                return False
            if max_open is not None and len(self._open) + reserve > max_open:
                raise over_capacity(max_open)
            record.created_seq = next(self._created)
            record.store_epoch = self._epoch
            record.created_at = record.last_active_at = time.time()
            self._sessions[record.session_id] = Session(record, retry_memory=self._retry_memory)
            self._by_key[record.api_key] = record.session_id
            if not record.ended:
                self._open.add(record.session_id)
            self._indexes.created(record)
            return True

    async def get(self, session_id: str) -> SessionRecord | None:
        session = self._sessions.get(session_id)
        return session.snapshot() if session else None

    async def find_by_key(self, api_key: str) -> SessionRecord | None:
        session_id = self._by_key.get(api_key)
        return await self.get(session_id) if session_id else None

    async def list(self, group_id: str | None = None) -> builtins.list[SessionRecord]:
        view: View = "all" if group_id is None else "group"
        return await self.scan(view, key=group_id, limit=len(self._sessions) + 1)

    async def allocate(
        self, session_id: str, *, digest: bytes, retry: bool, pinned: int | None,
        content_key: str | None = None, created_seq: int | None = None, after: int | None = None,
    ) -> Slot | Stale:
        slot = self._session(session_id, created_seq).allocate(
            digest=digest, retry=retry, pinned=pinned, content_key=content_key, after=after)
        if isinstance(slot, Slot):
            with self._lock:
                self._indexes.touch(session_id)
        return slot

    async def occurrence(self, session_id: str, key: str, interaction_id: str) -> int:
        return self._session(session_id).occurrence(key, interaction_id)

    async def record(self, session_id: str, interaction: Interaction, *,
                     link: Link | None = None, sent: Sent | None = None,
                     after: int | None = None) -> Recorded:
        done = self._session(session_id).record(interaction, link, sent, after)
        with self._lock:
            self._indexes.touch(session_id)
            self._indexes.changed(wake=False)
        return done

    async def interactions(self, session_id: str) -> builtins.list[Interaction]:
        return self._session(session_id).interactions()

    async def changes(self, session_id: str, after: int) -> tuple[int, builtins.list[bytes]]:
        return self._session(session_id).changes(after)

    async def stored_bytes(self) -> int:
        """The bytes of every stored interaction record (what a rollout costs here)."""
        with self._lock:
            sessions = list(self._sessions.values())
        return sum(s.stored_bytes() for s in sessions)

    async def set_reward(
        self, session_id: str, reward: float, interaction_id: str | None
    ) -> str | None:
        session = self._session(session_id)
        if interaction_id is not None and not session.has_interaction(interaction_id):
            raise SessionNotFound(f"interaction {interaction_id!r} not found in {session_id!r}")
        rewarded = session.set_reward(reward, interaction_id)
        with self._lock:
            self._indexes.changed(wake=False)
        return rewarded

    async def end(
        self, session_id: str, *, abandoned_before: float | None = None
    ) -> SessionRecord:
        session = self._session(session_id)
        with self._lock:
            seq = next(self._ended)
            record = session.end(seq, abandoned_before)
            if self._sessions.get(session_id) is session and record.ended:
                self._open.discard(session_id)
                if record.ended_seq == seq and not record.exported:
                    self._indexes.ended(session_id, seq)
        return record

    def _set_exported(self, session_id: str) -> None:
        """Under the lock: the session is exported (out of the export views)."""
        session = self._sessions.get(session_id)
        if session is not None:
            session.mark_exported()
            self._indexes.exported(session_id)

    async def delete(self, session_id: str) -> bool:
        with self._lock:
            session = self._sessions.pop(session_id, None)
            if session is None:
                return False
            self._by_key.pop(session.api_key, None)
            self._open.discard(session_id)
            self._leases.drop(session_id)
            self._indexes.deleted(session.snapshot())
            return True

    async def count_open(self) -> int:
        return len(self._open)

    async def close(self) -> None:
        return None

    async def ack(self, batch_id: str, now: float) -> bool:
        batch = self._leases.ack(batch_id, now, self._set_exported)
        if batch is None:
            return False
        for session_id, _ in batch.sessions if batch.remove else ():
            await self.delete(session_id)
        return True


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
