"""The in-process store: fast, single-process, lost on restart.

Its views (``base.View``) are each a ``SeqIndex`` kept as sessions change, under the
store's lock; the activity order is an ``OrderedDict`` moved to its end on each
request or record, so the TTL sweep reads the least recently active first (every
session shares one TTL, so activity order is expiry order). Its export leases are kept
in memory too, by the rules of ``leases.py``.

A ``SeqIndex`` gets its ids in increasing sequence order (the store hands out
sequences under its lock), so it is an append-only list searched by bisection; removal
leaves a hole that reads skip, and the list is compacted once holes outnumber entries.
A read costs O(log n + what it returns + holes it crosses), and holes never exceed
entries.
"""

from __future__ import annotations

import bisect
import builtins
import heapq
import itertools
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import AbstractAsyncContextManager
from itertools import islice

from ..codec import Link, Sent
from ..interaction import Interaction
from ..record import Recorded, SessionRecord, Slot, Stale
from ..session import Session
from .base import RETRY_MEMORY, View, not_found, over_capacity
from .changes import ChangeSignal, Watch, signal_watch
from .leases import BATCH_KEEP_S, Batch

__all__ = ["MemoryStore", "SeqIndex"]


class MemoryStore:
    """``SessionStore`` over a dict of ``Session`` objects. Safe across threads;
    not shared across processes (use Redis for several workers or replicas)."""

    def __init__(self, *, retry_memory: int = RETRY_MEMORY) -> None:
        self._sessions: dict[str, Session] = {}
        self._by_key: dict[str, str] = {}
        self._lock = threading.Lock()
        self._created, self._ended = itertools.count(), itertools.count()
        self._open: set[str] = set()
        """Ids of sessions not ended, kept as they change: ``count_open`` is O(1)."""
        self._retry_memory = retry_memory
        self._epoch = secrets.token_hex(8)  # each process's store starts from nothing
        self._views = {"all": SeqIndex(), "unexported": SeqIndex(), "ready": SeqIndex()}
        self._keyed: dict[str, dict[str, SeqIndex]] = {"group": {}, "identity": {}}
        self._activity: OrderedDict[str, None] = OrderedDict()
        self._version = 0
        self._signal = ChangeSignal()
        self._leases: dict[str, tuple[str, float]] = {}
        """session_id -> (batch_id, until) of its latest lease."""
        self._batches: dict[str, Batch] = {}
        self._forget: list[tuple[float, str]] = []
        """(when to forget, batch_id): a heap, so pruning costs what it prunes."""

    def _session(self, session_id: str, created_seq: int | None = None) -> Session:
        session = self._sessions.get(session_id)
        if session is None or created_seq not in (None, session.created_seq):
            raise not_found(session_id)
        return session

    def _changed(self, *, wake: bool = True) -> None:
        """Under the lock: the listing changed; ``wake``: an export's choice may have
        too (a session created, ended, exported or deleted), so waiting exports look
        again."""
        self._version += 1
        if wake:
            self._signal.notify()

    def _touch(self, session_id: str) -> None:
        """Under the lock: the session was active now."""
        if session_id in self._activity:
            self._activity.move_to_end(session_id)

    def _keyed_views(self, record: SessionRecord) -> Iterator[tuple[dict[str, SeqIndex], str]]:
        for view, key in (("group", record.group_id), ("identity", record.identity)):
            if key is not None:
                yield self._keyed[view], key

    async def create(
        self, record: SessionRecord, *, max_open: int | None = None, reserve: int = 1
    ) -> bool:
        with self._lock:
            if record.session_id in self._sessions:
                return False
            if max_open is not None and len(self._open) + reserve > max_open:
                raise over_capacity(max_open)
            record.created_seq = seq = next(self._created)
            sid = record.session_id
            record.store_epoch = self._epoch
            record.created_at = record.last_active_at = time.time()
            self._sessions[sid] = Session(record, retry_memory=self._retry_memory)
            self._by_key[record.api_key] = sid
            if not record.ended:
                self._open.add(sid)
            self._views["all"].add(seq, sid)
            for table, key in self._keyed_views(record):
                table.setdefault(key, SeqIndex()).add(seq, sid)
            if not record.exported:
                self._views["unexported"].add(seq, sid)
                if record.ended and record.ended_seq is not None:
                    self._views["ready"].add(record.ended_seq, sid)
            self._activity[sid] = None
            self._changed()
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
                self._touch(session_id)
        return slot

    async def occurrence(self, session_id: str, key: str, interaction_id: str) -> int:
        return self._session(session_id).occurrence(key, interaction_id)

    async def record(self, session_id: str, interaction: Interaction, *,
                     link: Link | None = None, sent: Sent | None = None,
                     after: int | None = None) -> Recorded:
        done = self._session(session_id).record(interaction, link, sent, after)
        with self._lock:
            self._touch(session_id)
            self._changed(wake=False)
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
        rewarded = self._session(session_id).set_reward(reward, interaction_id)
        with self._lock:
            self._changed(wake=False)
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
                    self._views["ready"].add(seq, session_id)
                    self._changed()
        return record

    async def delete(self, session_id: str) -> bool:
        with self._lock:
            session = self._sessions.pop(session_id, None)
            if session is None:
                return False
            record = session.snapshot()
            self._by_key.pop(record.api_key, None)
            self._open.discard(session_id)
            self._leases.pop(session_id, None)
            for table, key in self._keyed_views(record):
                index = table.get(key)
                if index is not None:
                    index.remove(session_id)
                    if not index:
                        del table[key]
            for index in self._views.values():
                index.remove(session_id)
            self._activity.pop(session_id, None)
            self._changed()
            return True

    async def count_open(self) -> int:
        return len(self._open)

    async def close(self) -> None:
        return None

    def _index(self, view: View, key: str | None) -> SeqIndex | None:
        if view in ("group", "identity"):
            return self._keyed[view].get(key or "")
        return self._views[view]

    async def scan(
        self, view: View, *, key: str | None = None, after: int = -1, offset: int = 0,
        limit: int,
    ) -> builtins.list[SessionRecord]:
        with self._lock:
            index = self._index(view, key)
            if index is None:
                return []
            ids = list(islice(index.after(after), offset, offset + limit))
            return [self._sessions[s].snapshot() for s in ids]

    async def count(self, view: View, *, key: str | None = None) -> int:
        with self._lock:
            index = self._index(view, key)
            return 0 if index is None else len(index)

    async def idle(self, cutoff: float, limit: int) -> builtins.list[SessionRecord]:
        found: builtins.list[SessionRecord] = []
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

    # -- export leases (``leases.py``), under the lock --------------------------------

    def _prune(self, now: float) -> None:
        while self._forget and self._forget[0][0] <= now:
            _, batch_id = heapq.heappop(self._forget)
            batch = self._batches.get(batch_id)
            if batch is not None and batch.until + BATCH_KEEP_S <= now:
                del self._batches[batch_id]

    def _keep(self, batch_id: str, batch: Batch) -> None:
        self._batches[batch_id] = batch
        heapq.heappush(self._forget, (batch.until + BATCH_KEEP_S, batch_id))

    def _current(self, session_id: str, created_seq: int) -> SessionRecord | None:
        session = self._sessions.get(session_id)
        record = session.snapshot() if session is not None else None
        return record if record is not None and record.created_seq == created_seq else None

    async def lease(self, batch_id: str, records: builtins.list[SessionRecord], *,
                    now: float, until: float, remove: bool, named: bool) -> builtins.list[str]:
        with self._lock:
            self._prune(now)
            refused = []
            for r in records:
                found = self._current(r.session_id, r.created_seq)
                held = self._leases.get(r.session_id)
                if (found is None or (held is not None and held[1] > now)
                        or (not named and found.exported)):
                    refused.append(r.session_id)
            if refused:
                return refused
            for r in records:
                self._leases[r.session_id] = (batch_id, until)
            self._keep(batch_id, Batch([(r.session_id, r.created_seq) for r in records],
                                       remove, until))
            return []

    async def held_until(self, session_ids: builtins.list[str], now: float) -> dict[str, float]:
        with self._lock:
            return {s: held[1] for s in session_ids
                    if (held := self._leases.get(s)) is not None and held[1] > now}

    async def ack(self, batch_id: str, now: float) -> bool:
        with self._lock:
            self._prune(now)
            batch = self._batches.get(batch_id)
            if batch is None:
                return False
            mine = [s for s, seq in batch.sessions if self._current(s, seq) is not None]
            for session_id in mine:
                self._sessions[session_id].mark_exported()
                self._views["unexported"].remove(session_id)
                self._views["ready"].remove(session_id)
                self._changed()
                if self._leases.get(session_id, ("",))[0] == batch_id:
                    del self._leases[session_id]
            if not batch.acked:
                batch.acked, batch.until = True, min(batch.until, now)
                self._keep(batch_id, batch)
        for session_id in mine if batch.remove else ():
            await self.delete(session_id)
        return True


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
