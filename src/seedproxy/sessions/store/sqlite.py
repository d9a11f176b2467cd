"""The SQLite store: one durable proxy. ``sqlite:///path.db``.

Invariants: the database runs in WAL mode with ``synchronous=FULL``, so a method
returns only after its transaction is committed to disk; the store-wide
``created``/``ended`` counters and every session's ``next_index`` live in the file, so
a restart goes on from where it stopped and never reuses an index. Transactions, and
the file's identity and epoch: ``sqlite_core.py``, ``sqlite_open.py``.
"""

from __future__ import annotations

import builtins
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor

import orjson

from ...errors import SessionNotFound
from ..codec import Link, Sent, encode, resolve, with_reward
from ..interaction import Interaction
from ..record import Recorded, SessionRecord, apply_summary
from .base import RETRY_MEMORY, over_capacity
from .sqlite_leases import SqliteLeases
from .sqlite_open import open_file
from .sqlite_reads import SqliteReads
from .sqlite_slots import SqliteSlots

__all__ = ["SqliteStore"]


class SqliteStore(SqliteSlots, SqliteLeases, SqliteReads):
    """``SessionStore`` over one SQLite file. Safe across threads and tasks; several
    processes may share the file (``BEGIN IMMEDIATE`` serialises their writes).
    ``check_s``: how often a waiting export reads the change counter for another
    process's writes (None: never)."""

    def __init__(
        self, path: str, *, retry_memory: int = RETRY_MEMORY, check_s: float | None = 1.0
    ) -> None:
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="seedproxy-sqlite")
        super().__init__(executor, executor.submit(open_file, path).result(),
                         retry_memory=retry_memory, check_s=check_s)

    async def create(
        self, record: SessionRecord, *, max_open: int | None = None, reserve: int = 1
    ) -> bool:
        def work(db: sqlite3.Connection) -> bool:
            if self._load(db, record.session_id) is not None:
                return False
            if max_open is not None and self._counter(db, "open") + reserve > max_open:
                raise over_capacity(max_open)
            record.created_seq = self._next(db, "created")
            record.created_at = record.last_active_at = time.time()
            record.store_epoch = self._epoch
            db.execute(
                "INSERT INTO sessions (session_id, api_key, group_id, created_seq, ended, record, "
                "identity, exported, ended_seq, last_active_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (record.session_id, record.api_key, record.group_id, record.created_seq,
                 int(record.ended), orjson.dumps(record.to_dict()), record.identity,
                 int(record.exported), record.ended_seq, record.last_active_at),
            )
            self._bump(db, sessions=1, opened=0 if record.ended else 1, wake=True)
            return True

        return await self._run(work)

    async def record(self, session_id: str, interaction: Interaction, *,
                     link: Link | None = None, sent: Sent | None = None,
                     after: int | None = None) -> Recorded:
        data = encode(interaction, link, sent)

        def work(db: sqlite3.Connection) -> Recorded:
            record = self._require(db, session_id)
            current = after is not None and not db.execute(
                "SELECT 1 FROM interactions WHERE session_id = ? AND seq > ? LIMIT 1",
                (session_id, after)).fetchone()
            new = db.execute(
                "SELECT 1 FROM interactions WHERE session_id = ? AND interaction_id = ?",
                (session_id, interaction.interaction_id),
            ).fetchone() is None
            seq = self._next(db, "records") + 1
            db.execute(
                "INSERT OR REPLACE INTO interactions "
                "(session_id, interaction_id, request_index, data, seq) VALUES (?, ?, ?, ?, ?)",
                (session_id, interaction.interaction_id, interaction.request_index, data, seq),
            )
            apply_summary(record, interaction, new=new)
            record.last_active_at = time.time()
            self._save(db, record)
            self._bump(db)
            return Recorded(seq, data, current)

        return await self._run(work)

    async def interactions(self, session_id: str) -> builtins.list[Interaction]:
        def work(db: sqlite3.Connection) -> builtins.list[bytes]:
            self._require(db, session_id)
            rows = db.execute("SELECT data FROM interactions WHERE session_id = ?", (session_id,))
            return [r[0] for r in rows]

        return resolve(await self._read(work))

    async def changes(self, session_id: str, after: int) -> tuple[int, builtins.list[bytes]]:
        def work(db: sqlite3.Connection) -> tuple[int, builtins.list[bytes]]:
            self._require(db, session_id)
            return self._newer(db, session_id, after)

        return await self._read(work)

    async def stored_bytes(self) -> int:
        """The bytes of every stored interaction record (what a rollout costs here)."""
        def work(db: sqlite3.Connection) -> int:
            row = db.execute("SELECT coalesce(sum(length(data)), 0) FROM interactions")
            return int(row.fetchone()[0])

        return await self._read(work)

    async def set_reward(
        self, session_id: str, reward: float, interaction_id: str | None
    ) -> str | None:
        def work(db: sqlite3.Connection) -> str | None:
            record = self._require(db, session_id)
            if interaction_id is None:
                row = db.execute(
                    "SELECT interaction_id, data FROM interactions WHERE session_id = ? "
                    "ORDER BY request_index DESC, interaction_id DESC LIMIT 1",
                    (session_id,),
                ).fetchone()
            else:
                row = db.execute(
                    "SELECT interaction_id, data FROM interactions "
                    "WHERE session_id = ? AND interaction_id = ?",
                    (session_id, interaction_id),
                ).fetchone()
                if row is None:
                    raise SessionNotFound(
                        f"interaction {interaction_id!r} not found in {session_id!r}"
                    )
            record.reward = reward
            self._save(db, record)
            self._bump(db)
            if row is None:
                return None
            db.execute(
                "UPDATE interactions SET data = ? WHERE session_id = ? AND interaction_id = ?",
                (with_reward(row[1], reward), session_id, row[0]),
            )
            return str(row[0])

        return await self._run(work)

    async def end(
        self, session_id: str, *, abandoned_before: float | None = None
    ) -> SessionRecord:
        def work(db: sqlite3.Connection) -> SessionRecord:
            record = self._require(db, session_id)
            if not record.ended and (abandoned_before is None
                                     or record.last_active_at <= abandoned_before):
                record.ended = True
                record.ended_seq = self._next(db, "ended")
                record.end_status = "ended" if abandoned_before is None else "abandoned"
                self._save(db, record)
                self._bump(db, opened=-1, wake=True)
            return record

        return await self._run(work)

    async def delete(self, session_id: str) -> bool:
        return await self._run(self._delete_rows, session_id)
