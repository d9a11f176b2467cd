"""A SQLite store's file, its transactions and its reads: the core ``SqliteStore``
runs on.

Invariants: every transaction runs on one dedicated thread (the event loop never waits
on disk), on the file that was opened only; a write transaction is ``BEGIN
IMMEDIATE`` (one writer across processes), a read one a plain ``BEGIN`` (a snapshot
that never waits for, nor blocks, another process's writer); waiting exports in this
process are woken once a transaction that may change their choice commits.

A file deleted or replaced under the proxy stops the store (``sqlite_open.py``).

Reads: each view (``base.View``) is one index of the ``sessions`` table (partial ones
for ``unexported`` and ``ready``), so a page is an index range read that costs what it
returns. Counters (table ``counters``): ``sessions`` (the total), ``open`` and
``version`` (``changes.py``), changed in the transaction that changes a session; a
waiting export in another process on the file sees ``version`` move within ``check_s``.
"""

from __future__ import annotations

import asyncio
import builtins
import sqlite3
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractAsyncContextManager
from typing import Any, TypeVar

import orjson

from ...errors import SessionNotFound, StoreError
from ..record import SessionRecord
from .base import View
from .changes import ChangeSignal, Watch, signal_watch
from .sqlite_open import FileIdentity

__all__ = ["IDLE_QUERY", "PAGE_QUERIES", "SqliteFile", "records"]

T = TypeVar("T")

_WHERE = {"all": "", "group": "group_id = ? AND ", "identity": "identity = ? AND ",
          "unexported": "exported = 0 AND ", "ready": "ended = 1 AND exported = 0 AND "}
PAGE_QUERIES = {
    view: f"SELECT record FROM sessions WHERE {where}{seq} > ? ORDER BY {seq} LIMIT ? OFFSET ?"
    for view, where in _WHERE.items()
    for seq in ["ended_seq" if view == "ready" else "created_seq"]}
"""One statement per view (tests check each reads an index)."""

REWARD_QUERIES = {
    "latest": ("SELECT interaction_id, data FROM interactions WHERE session_id = ? "
               "ORDER BY request_index DESC, interaction_id DESC LIMIT 1"),
    "named": ("SELECT interaction_id, data FROM interactions "
              "WHERE session_id = ? AND interaction_id = ?"),
}
"""The interaction a reward goes to: the newest, or the named one by its key."""

IDLE_QUERY = ("SELECT record FROM sessions WHERE last_active_at <= ? "
              "ORDER BY last_active_at LIMIT ?")


def records(rows: Iterable[Any]) -> list[SessionRecord]:
    """The records of rows whose first column is a record's blob."""
    return [SessionRecord.from_dict(orjson.loads(row[0])) for row in rows]


class SqliteFile:
    """One open SQLite store file: its transactions, the row helpers they use, its reads.
    ``check_s``: how often a waiting export reads the change counter for another
    process's writes (None: never)."""

    def __init__(
        self, executor: ThreadPoolExecutor,
        opened: tuple[sqlite3.Connection, FileIdentity | None, str],
        *, retry_memory: int, check_s: float | None,
    ) -> None:
        """``opened``: ``sqlite_open.open_file``'s answer, on ``executor``'s one thread."""
        self._retry_memory, self._check_s = retry_memory, check_s
        self._signal = ChangeSignal()
        self._wake = False
        """Set in a write transaction that may change an export's choice: wake waiting
        exports once it commits."""
        self._executor = executor
        self._db, self._identity, self._epoch = opened

    async def _run(self, fn: Callable[..., T], *args: Any, mode: str = "IMMEDIATE") -> T:
        """Run ``fn(db, *args)`` in one ``BEGIN {mode}`` transaction on the store's
        thread: a write one by default; ``_read``'s a snapshot that takes no write lock."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._guarded, mode, fn, args)

    async def _read(self, fn: Callable[..., T], *args: Any) -> T:
        return await self._run(fn, *args, mode="DEFERRED")

    def _guarded(self, mode: str, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        if self._identity is not None:
            self._identity.check()
        db = self._db
        self._wake = False
        try:
            db.execute(f"BEGIN {mode}")
            try:
                result = fn(db, *args)
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
            if self._wake:
                self._signal.notify()
            return result
        except sqlite3.Error as exc:
            raise StoreError(f"SQLite store failed: {exc}") from exc

    # -- helpers (store thread, inside a transaction) --------------------------------

    @staticmethod
    def _load(db: sqlite3.Connection, session_id: str,
              created_seq: int | None = None) -> SessionRecord | None:
        """The session; None when unknown or (``created_seq``) another under its id."""
        found = records(db.execute("SELECT record FROM sessions WHERE session_id = ?",
                                   (session_id,)))
        return found[0] if found and created_seq in (None, found[0].created_seq) else None

    def _require(self, db: sqlite3.Connection, session_id: str,
                 created_seq: int | None = None) -> SessionRecord:
        record = self._load(db, session_id, created_seq)
        if record is None:
            raise SessionNotFound(f"session {session_id!r} not found")
        return record

    @staticmethod
    def _save(db: sqlite3.Connection, record: SessionRecord) -> None:
        db.execute(
            "UPDATE sessions SET ended = ?, exported = ?, ended_seq = ?, last_active_at = ?, "
            "record = ? WHERE session_id = ?",
            (int(record.ended), int(record.exported), record.ended_seq, record.last_active_at,
             orjson.dumps(record.to_dict()), record.session_id),
        )

    @staticmethod
    def _next(db: sqlite3.Connection, counter: str) -> int:
        row = db.execute(
            "INSERT INTO counters (name, value) VALUES (?, 0) "
            "ON CONFLICT (name) DO UPDATE SET value = value + 1 RETURNING value",
            (counter,),
        ).fetchone()
        return int(row[0])

    def _bump(self, db: sqlite3.Connection, *, sessions: int = 0, opened: int = 0,
              wake: bool = False) -> None:
        """In a write transaction: the listing changed; the total and open counts change
        by ``sessions`` and ``opened``; ``wake``: an export's choice may have too."""
        db.execute("UPDATE counters SET value = value + CASE name WHEN 'version' THEN 1 "
                   "WHEN 'sessions' THEN ? ELSE ? END "
                   "WHERE name IN ('version', 'sessions', 'open')", (sessions, opened))
        self._wake = self._wake or wake

    @staticmethod
    def _newer(db: sqlite3.Connection, session_id: str,
               after: int) -> tuple[int, list[bytes]]:
        """``changes``' answer, inside a transaction."""
        rows = db.execute(
            "SELECT seq, data FROM interactions WHERE session_id = ? AND seq > ? ORDER BY seq",
            (session_id, after),
        ).fetchall()
        return (int(rows[-1][0]) if rows else after), [r[1] for r in rows]

    def _delete_rows(self, db: sqlite3.Connection, session_id: str) -> bool:
        row = db.execute(
            "DELETE FROM sessions WHERE session_id = ? RETURNING ended", (session_id,)
        ).fetchone()
        if row is not None:
            self._bump(db, sessions=-1, opened=0 if row[0] else -1, wake=True)
        for table in ("recent", "pins", "occurrences", "interactions", "leases"):
            db.execute(f"DELETE FROM {table} WHERE session_id = ?", (session_id,))
        return row is not None

    @staticmethod
    def _counter(db: sqlite3.Connection, name: str) -> int:
        return int(db.execute("SELECT value FROM counters WHERE name = ?", (name,)).fetchone()[0])

    async def close(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self._executor, self._db.close)
        self._executor.shutdown(wait=True)

    # -- reads, each one read transaction --------------------------------------------

    async def get(self, session_id: str) -> SessionRecord | None:
        return await self._read(self._load, session_id)

    async def find_by_key(self, api_key: str) -> SessionRecord | None:
        def work(db: sqlite3.Connection) -> builtins.list[SessionRecord]:
            return records(db.execute("SELECT record FROM sessions WHERE api_key = ?",
                                      (api_key,)).fetchmany(1))

        found = await self._read(work)
        return found[0] if found else None

    async def list(self, group_id: str | None = None) -> builtins.list[SessionRecord]:
        view: View = "all" if group_id is None else "group"
        return await self.scan(view, key=group_id, limit=-1)  # SQLite: no limit

    async def scan(
        self, view: View, *, key: str | None = None, after: int = -1, offset: int = 0,
        limit: int,
    ) -> builtins.list[SessionRecord]:
        args = (key, after, limit, offset) if view in ("group", "identity") else (
            after, limit, offset)
        return await self._read(lambda db: records(db.execute(PAGE_QUERIES[view], args)))

    async def count(self, view: View, *, key: str | None = None) -> int:
        def work(db: sqlite3.Connection) -> int:
            if view == "all":
                return self._counter(db, "sessions")
            column = {"group": "group_id", "identity": "identity"}[view]
            return int(db.execute(f"SELECT count(*) FROM sessions WHERE {column} = ?",
                                  (key,)).fetchone()[0])

        return await self._read(work)

    async def count_open(self) -> int:
        return await self._read(self._counter, "open")

    async def idle(self, cutoff: float, limit: int) -> builtins.list[SessionRecord]:
        return await self._read(lambda db: records(db.execute(IDLE_QUERY, (cutoff, limit))))

    async def version(self) -> int:
        return await self._read(self._counter, "version")

    def watch(self) -> AbstractAsyncContextManager[Watch]:
        return signal_watch(self._signal, self.version, self._check_s)
