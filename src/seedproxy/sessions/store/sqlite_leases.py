"""Export leases in the SQLite file (see ``leases.py`` for the rules): a lease and its
batch are rows committed with the transaction that takes them, so an unacknowledged
lease outlives a restart and still runs out, and an acknowledged batch stays
acknowledged. Each call is one ``BEGIN IMMEDIATE`` transaction: two processes on one
file never lease the same session."""

from __future__ import annotations

import builtins
import sqlite3

import orjson

from ..record import SessionRecord
from .leases import BATCH_KEEP_S, Batch
from .sqlite_core import SqliteFile

__all__ = ["SqliteLeases"]

_CHUNK = 500
"""Ids per ``IN (...)`` list: well under SQLite's bound on variables."""


class SqliteLeases(SqliteFile):
    async def lease(
        self, batch_id: str, records: builtins.list[SessionRecord], *,
        now: float, until: float, remove: bool, named: bool,
    ) -> builtins.list[str]:
        def work(db: sqlite3.Connection) -> builtins.list[str]:
            db.execute("DELETE FROM batches WHERE keep_until <= ?", (now,))
            refused = []
            for r in records:
                current = self._load(db, r.session_id, r.created_seq)
                held = db.execute(
                    "SELECT until FROM leases WHERE session_id = ?", (r.session_id,)
                ).fetchone()
                if (current is None or (held is not None and held[0] > now)
                        or (not named and current.exported)):
                    refused.append(r.session_id)
            if refused:
                return refused
            db.executemany(
                "INSERT OR REPLACE INTO leases (session_id, batch_id, until) VALUES (?, ?, ?)",
                [(r.session_id, batch_id, until) for r in records],
            )
            batch = Batch([(r.session_id, r.created_seq) for r in records], remove, until)
            db.execute(
                "INSERT INTO batches (batch_id, data, keep_until) VALUES (?, ?, ?)",
                (batch_id, orjson.dumps(batch), until + BATCH_KEEP_S),
            )
            return []

        return await self._run(work)

    async def held_until(self, session_ids: builtins.list[str], now: float) -> dict[str, float]:
        def work(db: sqlite3.Connection) -> dict[str, float]:
            found: dict[str, float] = {}
            for start in range(0, len(wanted), _CHUNK):
                part = wanted[start:start + _CHUNK]
                rows = db.execute(
                    "SELECT session_id, until FROM leases WHERE until > ? AND session_id IN "
                    f"({','.join('?' * len(part))})", (now, *part))
                found.update((str(s), float(u)) for s, u in rows)
            return found

        wanted = list(dict.fromkeys(session_ids))
        return await self._read(work) if wanted else {}

    async def ack(self, batch_id: str, now: float) -> bool:
        def work(db: sqlite3.Connection) -> bool:
            row = db.execute(
                "SELECT data FROM batches WHERE batch_id = ? AND keep_until > ?", (batch_id, now)
            ).fetchone()
            if row is None:
                return False
            batch = Batch.from_json(orjson.loads(row[0]))
            for session_id, created_seq in batch.sessions:
                record = self._load(db, session_id, created_seq)
                if record is None:
                    continue  # gone, or a newer session under that id
                db.execute("DELETE FROM leases WHERE session_id = ? AND batch_id = ?",
                           (session_id, batch_id))
                if batch.remove:
                    self._delete_rows(db, session_id)
                elif not record.exported:
                    record.exported = True
                    self._save(db, record)
                    self._bump(db, wake=True)
            if not batch.acked:
                batch.acked, batch.until = True, min(batch.until, now)
                db.execute(
                    "UPDATE batches SET data = ?, keep_until = ? WHERE batch_id = ?",
                    (orjson.dumps(batch), now + BATCH_KEEP_S, batch_id),
                )
            return True

        return await self._run(work)
