"""The in-process store: fast, single-process, lost on restart."""

from __future__ import annotations

import builtins
import itertools
import secrets
import threading
import time

from ...errors import SessionNotFound
from ..codec import Link, Sent
from ..interaction import Interaction
from ..record import Recorded, SessionRecord, Slot, Stale
from ..session import Session
from .base import RETRY_MEMORY, View, over_capacity
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
