"""The in-process store: fast, single-process, lost on restart."""

from __future__ import annotations

import builtins
import itertools
import threading
import time

from ...errors import SessionNotFound
from ..codec import Link, Sent
from ..interaction import Interaction
from ..record import SessionRecord, Slot
from ..session import Session
from .base import RETRY_MEMORY
from .leases import MemoryLeases

__all__ = ["MemoryStore"]


class MemoryStore(MemoryLeases):
    """``SessionStore`` over a dict of ``Session`` objects. Safe across threads;
    not shared across processes (use Redis for several workers or replicas). Export
    leases are kept in memory too (``leases.py``)."""

    def __init__(self, *, retry_memory: int = RETRY_MEMORY) -> None:
        self._sessions: dict[str, Session] = {}
        self._by_key: dict[str, str] = {}
        self._lock = threading.Lock()
        self._created = itertools.count()
        self._ended = itertools.count()
        self._open: set[str] = set()
        """Ids of sessions not ended, kept as they change: ``count_open`` is O(1)."""
        self._retry_memory = retry_memory
        self._init_leases()

    def _session(self, session_id: str) -> Session:
        try:
            return self._sessions[session_id]
        except KeyError:
            raise SessionNotFound(f"session {session_id!r} not found") from None

    async def create(self, record: SessionRecord) -> bool:
        with self._lock:
            if record.session_id in self._sessions:
                return False
            record.created_seq = next(self._created)
            record.created_at = record.last_active_at = time.time()
            self._sessions[record.session_id] = Session(record, retry_memory=self._retry_memory)
            self._by_key[record.api_key] = record.session_id
            if not record.ended:
                self._open.add(record.session_id)
            return True

    async def get(self, session_id: str) -> SessionRecord | None:
        session = self._sessions.get(session_id)
        return session.snapshot() if session else None

    async def find_by_key(self, api_key: str) -> SessionRecord | None:
        session_id = self._by_key.get(api_key)
        return await self.get(session_id) if session_id else None

    async def list(self, group_id: str | None = None) -> builtins.list[SessionRecord]:
        with self._lock:
            sessions = list(self._sessions.values())
        records = [s.snapshot() for s in sessions]
        if group_id is not None:
            records = [r for r in records if r.group_id == group_id]
        return sorted(records, key=lambda r: r.created_seq)

    async def allocate(
        self, session_id: str, *, digest: bytes, retry: bool, pinned: int | None
    ) -> Slot:
        return self._session(session_id).allocate(digest=digest, retry=retry, pinned=pinned)

    async def occurrence(self, session_id: str, key: str, interaction_id: str) -> int:
        return self._session(session_id).occurrence(key, interaction_id)

    async def record(self, session_id: str, interaction: Interaction, *,
                     link: Link | None = None, sent: Sent | None = None) -> None:
        self._session(session_id).record(interaction, link, sent)

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
        return session.set_reward(reward, interaction_id)

    async def end(self, session_id: str) -> SessionRecord:
        session = self._session(session_id)
        with self._lock:
            seq = next(self._ended)
            if self._sessions.get(session_id) is session:
                self._open.discard(session_id)
        return session.end(seq)

    async def mark_exported(self, session_ids: builtins.list[str]) -> None:
        for session_id in session_ids:
            session = self._sessions.get(session_id)
            if session is not None:
                session.mark_exported()

    async def delete(self, session_id: str) -> bool:
        with self._lock:
            session = self._sessions.pop(session_id, None)
            if session is None:
                return False
            self._by_key.pop(session.api_key, None)
            self._open.discard(session_id)
            self._leases.pop(session_id, None)
            return True

    async def count_open(self) -> int:
        return len(self._open)

    async def close(self) -> None:
        return None
