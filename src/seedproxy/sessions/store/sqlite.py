"""The SQLite store: one durable proxy. ``sqlite:///path.db``.

Invariants: the database runs in WAL mode with ``synchronous=FULL``, so a method
returns only after its transaction is committed to disk (export leases and batches
too: an unacknowledged lease outlives a restart and still runs out); the store-wide
``created``/``ended`` counters and every session's ``next_index`` live in the file, so
a restart goes on from where it stopped and never reuses an index. Transactions, and
the file's identity and epoch: ``sqlite_core.py``, ``sqlite_open.py``.

Slots: the retry memory (table ``recent``) keeps a session's last ``retry_memory``
digests by a per-session clock: a digest seen again keeps its place, a reused one moves
to the front. A pinned index takes ``i{n}.p{k}`` ids, ``k`` counting its uses (table
``pins``). An interaction keeps the occurrence number it was given first (table
``occurrences``).
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
from ..record import Recorded, SessionRecord, Slot, Stale, apply_summary
from .base import RETRY_MEMORY, over_capacity
from .leases import BATCH_KEEP_S, Batch
from .sqlite_core import REWARD_QUERIES, SqliteFile
from .sqlite_open import open_file

__all__ = ["SqliteStore"]

_CHUNK = 500
"""Ids per ``IN (...)`` list: well under SQLite's bound on variables."""


class SqliteStore(SqliteFile):
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
            row = db.execute(
                REWARD_QUERIES["latest"] if interaction_id is None else REWARD_QUERIES["named"],
                (session_id,) if interaction_id is None else (session_id, interaction_id),
            ).fetchone()
            if row is None and interaction_id is not None:
                raise SessionNotFound(f"interaction {interaction_id!r} not found in {session_id!r}")
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

    # -- export leases (``leases.py``) -------------------------------------------------

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
