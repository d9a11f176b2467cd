"""Request slots in the SQLite file: ``allocate`` (an index, or a retried request's
own, or a pinned one) and ``occurrence`` (the number of an interaction among those of
one content key), for ``SqliteStore`` (see ``base.SessionStore`` for the rules).

Invariants: each call is one ``BEGIN IMMEDIATE`` transaction, so an index or a number
is handed out once even by several processes on one file, and a failure takes neither.
The retry memory (table ``recent``) keeps a session's last ``retry_memory`` digests by
a per-session clock: a digest seen again keeps its place, a reused one moves to the
front. A pinned index takes ``i{n}.p{k}`` ids, ``k`` counting its uses (table ``pins``),
and leaves ``next_index`` alone. An interaction keeps the occurrence number it was
given first (table ``occurrences``).
"""

from __future__ import annotations

import sqlite3
import time

from ..record import SessionRecord, Slot, Stale
from .sqlite_core import SqliteFile

__all__ = ["SqliteSlots"]


class SqliteSlots(SqliteFile):
    async def allocate(
        self, session_id: str, *, digest: bytes, retry: bool, pinned: int | None,
        content_key: str | None = None, created_seq: int | None = None, after: int | None = None,
    ) -> Slot | Stale:
        def work(db: sqlite3.Connection) -> Slot | Stale:
            record = self._require(db, session_id, created_seq)
            if after is not None and (newer := self._newer(db, session_id, after))[1]:
                return Stale(*newer)
            slot = self._allocate(db, record, digest, retry, pinned)
            if content_key is None:
                return slot
            number = self._occurrence(db, session_id, content_key, slot.interaction_id)
            return Slot(slot.index, slot.interaction_id, slot.reused, number)

        return await self._run(work)

    def _allocate(self, db: sqlite3.Connection, record: SessionRecord, digest: bytes,
                  retry: bool, pinned: int | None) -> Slot:
        session_id = record.session_id
        clock = db.execute(
            "SELECT coalesce(max(clock), 0) + 1 FROM recent WHERE session_id = ?", (session_id,)
        ).fetchone()[0]
        if retry:
            kept = db.execute(
                "SELECT request_index, interaction_id FROM recent "
                "WHERE session_id = ? AND digest = ?",
                (session_id, digest),
            ).fetchone()
            if kept is not None:
                db.execute(
                    "UPDATE recent SET clock = ? WHERE session_id = ? AND digest = ?",
                    (clock, session_id, digest),
                )
                return Slot(int(kept[0]), str(kept[1]), reused=True)
        if pinned is not None:
            used = db.execute(
                "INSERT INTO pins (session_id, request_index, used) VALUES (?, ?, 1) "
                "ON CONFLICT DO UPDATE SET used = used + 1 RETURNING used",
                (session_id, pinned),
            ).fetchone()[0]
            slot = Slot(pinned, f"i{pinned}.p{int(used) - 1}")
        else:
            slot = Slot(record.next_index, f"i{record.next_index}")
            record.next_index += 1
        record.last_active_at = time.time()
        self._save(db, record)
        # A digest seen before keeps its place in the retry memory (as a dict does).
        db.execute(
            "INSERT INTO recent (session_id, digest, request_index, interaction_id, clock) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT DO UPDATE SET "
            "request_index = excluded.request_index, interaction_id = excluded.interaction_id",
            (session_id, digest, slot.index, slot.interaction_id, clock),
        )
        db.execute(
            "DELETE FROM recent WHERE session_id = ? AND clock <= ("
            " SELECT clock FROM recent WHERE session_id = ?"
            " ORDER BY clock DESC LIMIT 1 OFFSET ?)",
            (session_id, session_id, self._retry_memory),
        )
        return slot

    async def occurrence(self, session_id: str, key: str, interaction_id: str) -> int:
        def work(db: sqlite3.Connection) -> int:
            self._require(db, session_id)
            return self._occurrence(db, session_id, key, interaction_id)

        return await self._run(work)

    @staticmethod
    def _occurrence(db: sqlite3.Connection, session_id: str, key: str,
                    interaction_id: str) -> int:
        """The occurrence of ``key`` that ``interaction_id`` takes (or took)."""
        known = db.execute(
            "SELECT occurrence FROM occurrences WHERE session_id = ? AND interaction_id = ?",
            (session_id, interaction_id),
        ).fetchone()
        if known is not None:
            return int(known[0])
        number = int(db.execute(
            "SELECT count(*) FROM occurrences WHERE session_id = ? AND key = ?",
            (session_id, key),
        ).fetchone()[0])
        db.execute(
            "INSERT INTO occurrences (session_id, interaction_id, key, occurrence) "
            "VALUES (?, ?, ?, ?)",
            (session_id, interaction_id, key, number),
        )
        return number
