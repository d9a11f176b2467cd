"""The in-process store: fast, single-process, lost on restart."""

from __future__ import annotations

import builtins
import itertools
import secrets
import threading
import time
from contextlib import AbstractAsyncContextManager

from ...errors import SessionNotFound
from ..codec import Link, Sent
from ..interaction import Interaction
from ..record import Recorded, SessionRecord, Slot, Stale
from ..session import Session
from .base import RETRY_MEMORY, View, over_capacity
from .changes import Watch, signal_watch
from .leases import MemoryLeases
from .memory_reads import MemoryIndexes

__all__ = ["MemoryStore"]


class MemoryStore:
    """``SessionStore`` over a dict of ``Session`` objects. Safe across threads;
    not shared across processes (use Redis for several workers or replicas). Export
    leases are kept in memory too (``leases.py``), and so are the indexes that pages,
    exports and the TTL sweep read (``memory_reads.py``), each changed under the
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
        self._leases = MemoryLeases()
        self._indexes = MemoryIndexes()

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

    # -- export leases (``leases.py``) -------------------------------------------------

    def _current(self, session_id: str, created_seq: int) -> SessionRecord | None:
        session = self._sessions.get(session_id)
        record = session.snapshot() if session is not None else None
        return record if record is not None and record.created_seq == created_seq else None

    async def lease(
        self, batch_id: str, records: builtins.list[SessionRecord], *,
        now: float, until: float, remove: bool, named: bool,
    ) -> builtins.list[str]:
        with self._lock:
            return self._leases.lease(batch_id, records, self._current, now=now, until=until,
                                      remove=remove, named=named)

    async def held_until(self, session_ids: builtins.list[str], now: float) -> dict[str, float]:
        with self._lock:
            return self._leases.held_until(session_ids, now)

    async def ack(self, batch_id: str, now: float) -> bool:
        with self._lock:
            batch = self._leases.ack(batch_id, now, self._current)
            if batch is None:
                return False
            for session_id, _ in batch.sessions:
                self._set_exported(session_id)
        if batch.remove:
            for session_id, _ in batch.sessions:
                await self.delete(session_id)
        return True

    # -- reads (``memory_reads.py``) ---------------------------------------------------

    async def scan(
        self, view: View, *, key: str | None = None, after: int = -1, offset: int = 0,
        limit: int,
    ) -> builtins.list[SessionRecord]:
        with self._lock:
            ids = self._indexes.ids(view, key, after, offset, limit)
            return [self._sessions[s].snapshot() for s in ids]

    async def count(self, view: View, *, key: str | None = None) -> int:
        with self._lock:
            return self._indexes.count(view, key)

    async def idle(self, cutoff: float, limit: int) -> builtins.list[SessionRecord]:
        found: builtins.list[SessionRecord] = []
        with self._lock:
            for session_id in self._indexes.activity:
                record = self._sessions[session_id].snapshot()
                if record.last_active_at > cutoff or len(found) >= limit:
                    break
                found.append(record)
        return found

    async def version(self) -> int:
        return self._indexes.version

    def watch(self) -> AbstractAsyncContextManager[Watch]:
        return signal_watch(self._indexes.signal, self.version, None)
