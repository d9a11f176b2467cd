"""A SQLite store's file and its transactions: the core its slots, leases and reads
(``sqlite_slots.py``, ``sqlite_leases.py``, ``sqlite_reads.py``) and ``SqliteStore``
run on.

Invariants: every transaction runs on one dedicated thread (the event loop never waits
on disk), on the file that was opened only; a write transaction is ``BEGIN
IMMEDIATE`` (one writer across processes), a read one a plain ``BEGIN`` (a snapshot
that never waits for, nor blocks, another process's writer); waiting exports in this
process are woken once a transaction that may change their choice commits.

The file that was opened: each transaction first checks that its path still names
that file (same device and inode), so a file deleted or replaced under a running proxy
is a ``StoreError`` (503) on every request and on ``/readyz``, never a store that goes
on writing to an unlinked file a restart cannot see. Every file holds a random
``epoch``, drawn once when the file is first opened and kept in it: records carry it,
so the records of a new file (whose indices start again at 0, with the same seeds for
the same identity) are told apart from an old file's. Seeds never depend on it.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson

from ...errors import SessionNotFound, StoreError
from ..record import SessionRecord
from .changes import ChangeSignal

__all__ = ["META_SCHEMA", "FileIdentity", "SqliteFile", "file_epoch"]

T = TypeVar("T")


class SqliteFile:
    """One open SQLite store file: its transactions and the row helpers they use.
    ``check_s``: how often a waiting export reads the change counter for another
    process's writes (None: never)."""


    def __init__(
        self, executor: ThreadPoolExecutor, opened: tuple[sqlite3.Connection, FileIdentity | None,
                                                          str],
        *, retry_memory: int, check_s: float | None,
    ) -> None:
        """``opened``: ``sqlite_open.open_file``'s answer, on ``executor``'s one thread."""
        self._retry_memory = retry_memory
        self._signal = ChangeSignal()
        self._check_s = check_s
        self._wake = False
        self._executor = executor
        self._db, self._identity, self._epoch = opened

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn`` in one write transaction (``BEGIN IMMEDIATE``)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._guarded, "IMMEDIATE", fn, args)

    async def _read(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a read-only ``fn`` in one deferred transaction: a consistent snapshot
        that takes no write lock."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._guarded, "DEFERRED", fn, args)

    def _guarded(self, mode: str, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        """Run ``fn`` in one ``BEGIN {mode}`` transaction on the store's thread, on the
        file that was opened only."""
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
    def _load(db: sqlite3.Connection, session_id: str) -> SessionRecord | None:
        row = db.execute(
            "SELECT record FROM sessions WHERE session_id = ?", (session_id,)
        ).fetchone()
        return SessionRecord.from_dict(orjson.loads(row[0])) if row else None

    def _require(self, db: sqlite3.Connection, session_id: str) -> SessionRecord:
        record = self._load(db, session_id)
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

    @staticmethod
    def _bump(db: sqlite3.Connection, *, sessions: int = 0) -> None:
        """In a write transaction: the listing changed (``sessions``: the total by)."""
        db.execute("UPDATE counters SET value = value + 1 WHERE name = 'version'")
        if sessions:
            db.execute("UPDATE counters SET value = value + ? WHERE name = 'sessions'",
                       (sessions,))

    def _wake_after_commit(self) -> None:
        """In a write transaction: an export's choice may change; wake waiting exports
        once it is committed."""
        self._wake = True

    @staticmethod
    def _count_open(db: sqlite3.Connection, delta: int) -> None:
        db.execute("UPDATE counters SET value = value + ? WHERE name = 'open'", (delta,))

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
        gone = row is not None
        if gone and not row[0]:
            self._count_open(db, -1)
        if gone:
            self._bump(db, sessions=-1)
            self._wake_after_commit()
        for table in ("recent", "pins", "occurrences", "interactions", "leases"):
            db.execute(f"DELETE FROM {table} WHERE session_id = ?", (session_id,))
        return bool(gone)

    @staticmethod
    def _open_now(db: sqlite3.Connection) -> int:
        row = db.execute("SELECT value FROM counters WHERE name = 'open'").fetchone()
        return int(row[0])

    async def close(self) -> None:
        def shut() -> None:
            self._db.close()

        await asyncio.get_running_loop().run_in_executor(self._executor, shut)
        self._executor.shutdown(wait=True)


META_SCHEMA = "CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);"


@dataclass(frozen=True, slots=True)
class FileIdentity:
    """The file a store opened: its absolute path, device and inode."""

    path: str
    device: int
    inode: int

    @classmethod
    def of(cls, path: str) -> FileIdentity | None:
        """The identity of the file at ``path`` now; None for no file (``:memory:``)."""
        try:
            found = os.stat(path)
        except FileNotFoundError:
            return None
        return cls(os.path.abspath(path), found.st_dev, found.st_ino)

    def check(self) -> None:
        """Raise ``StoreError`` unless the path still names the file that was opened."""
        try:
            found = os.stat(self.path)
        except OSError as exc:
            what = "deleted" if isinstance(exc, FileNotFoundError) else f"unreadable ({exc})"
            raise StoreError(self._lost(what)) from exc
        if (found.st_dev, found.st_ino) != (self.device, self.inode):
            raise StoreError(self._lost("replaced by another file"))

    def _lost(self, what: str) -> str:
        return (f"the SQLite store file {self.path} was {what} while the proxy ran; "
                "nothing more is stored in it. Restore the file, or restart the proxy: a "
                "new file is a new store epoch whose indices start again at 0")


def file_epoch(db: sqlite3.Connection) -> str:
    """The file's store epoch, drawn (16 hex digits) the first time the file is opened."""
    db.execute("INSERT OR IGNORE INTO meta (name, value) VALUES ('epoch', ?)",
               (secrets.token_hex(8),))
    return str(db.execute("SELECT value FROM meta WHERE name = 'epoch'").fetchone()[0])
