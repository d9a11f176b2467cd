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
Each store keeps its own leases by these rules (``memory.py``, ``sqlite.py``,
``redis.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["BATCH_KEEP_S", "Batch"]

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
