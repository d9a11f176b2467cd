"""Export leases: at-least-once delivery, as a queue with a visibility timeout.

An export leases its batch (``batch_id``) until ``until``: while the lease is live no
other export takes those sessions. Only ``ack`` takes them out of later exports for
good (marked exported, or deleted when the batch was leased with ``remove``); a lease
never acknowledged simply runs out and its sessions are candidates again, in the same
order as before (the order comes from ``created_seq``/``ended_seq``, never from the
lease). A batch names its sessions by ``(session_id, created_seq)``, so an ack never
touches a newer session that reused the id of a deleted one.

Times are wall-clock seconds passed in by the caller (``now``), so a lease outlives a
restart (SQLite) and means the same on every replica (Redis); tests pass their own.
This module holds the memory store's leases; ``sqlite_leases`` and ``redis_leases``
hold the durable ones, with the same rules.
"""

from __future__ import annotations

import heapq
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..record import SessionRecord
from ..session import Session

__all__ = ["BATCH_KEEP_S", "Batch", "MemoryLeases"]

BATCH_KEEP_S = 86400.0
"""How long a batch id is remembered past its lease's end (or its ack): an ack within
that time is answered (idempotently), one later is an unknown batch (404)."""


@dataclass(slots=True)
class Batch:
    """Stored as orjson writes the dataclass (its fields, in order)."""

    sessions: list[tuple[str, int]]
    """(session_id, created_seq) in delivery order."""
    remove: bool
    until: float
    acked: bool = False

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Batch:
        return cls([(str(s), int(q)) for s, q in data["sessions"]], bool(data["remove"]),
                   float(data["until"]), bool(data["acked"]))


class MemoryLeases:
    """The memory store's leases, over its sessions and under its lock (both given)."""

    def __init__(self, lock: threading.Lock, sessions: Mapping[str, Session]) -> None:
        self._lock, self._sessions = lock, sessions
        self._leases: dict[str, tuple[str, float]] = {}
        """session_id -> (batch_id, until) of its latest lease."""
        self._batches: dict[str, Batch] = {}
        self._forget: list[tuple[float, str]] = []
        """(when to forget, batch_id): a heap, so pruning costs what it prunes."""

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

    async def lease(self, batch_id: str, records: list[SessionRecord], *,
                    now: float, until: float, remove: bool, named: bool) -> list[str]:
        """See ``SessionStore.lease``."""
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

    async def held_until(self, session_ids: list[str], now: float) -> dict[str, float]:
        with self._lock:
            return {s: held[1] for s in session_ids
                    if (held := self._leases.get(s)) is not None and held[1] > now}

    def ack(self, batch_id: str, now: float, export: Callable[[str], None]) -> Batch | None:
        """Release the batch's leases and ``export`` (under the lock) each of its
        sessions still there: the batch, narrowed to those, for the store to delete
        when leased with ``remove``; None when unknown."""
        with self._lock:
            self._prune(now)
            batch = self._batches.get(batch_id)
            if batch is None:
                return None
            mine = [(s, seq) for s, seq in batch.sessions if self._current(s, seq) is not None]
            for session_id, _ in mine:
                export(session_id)
                if self._leases.get(session_id, ("",))[0] == batch_id:
                    del self._leases[session_id]
            if not batch.acked:
                batch.acked, batch.until = True, min(batch.until, now)
                self._keep(batch_id, batch)
            return Batch(mine, batch.remove, batch.until, batch.acked)

    def drop(self, session_id: str) -> None:
        """Under the lock: the session is deleted, and its lease with it."""
        self._leases.pop(session_id, None)
