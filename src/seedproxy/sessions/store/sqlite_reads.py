"""The SQLite store's indexes (``base.View``), expiry order and change counter.

The ``sessions`` table carries, beside the record's blob, the columns its indexes
need: ``identity``, ``exported``, ``ended_seq`` and ``last_active_at``, written with
the blob in the same statement (``SqliteStore._save``). Each view is one index
(partial ones for ``unexported`` and ``ready``), so a page is an index range read
that costs what it returns. A file from before these columns existed gets them, filled
from its blobs, once when it is opened.

Counters (table ``counters``): ``sessions`` (the total, kept as sessions come and
go) and ``version`` (see ``changes.py``), bumped in the transaction that changes a
session. A waiting export in this process is woken after the commit; one in another
process on the same file sees ``version`` move within ``check_s``.
"""

from __future__ import annotations

import builtins
import sqlite3
from contextlib import AbstractAsyncContextManager

import orjson

from ..record import SessionRecord
from .base import View
from .changes import Watch, signal_watch
from .sqlite_core import SqliteFile

__all__ = ["INDEX_COLUMNS", "SqliteReads", "migrate"]

INDEX_COLUMNS = (
    ("identity", "TEXT"),
    ("exported", "INTEGER NOT NULL DEFAULT 0"),
    ("ended_seq", "INTEGER"),
    ("last_active_at", "REAL NOT NULL DEFAULT 0"),
)

_INDEXES = """
CREATE INDEX IF NOT EXISTS sessions_identity ON sessions (identity, created_seq);
CREATE INDEX IF NOT EXISTS sessions_unexported ON sessions (created_seq) WHERE exported = 0;
CREATE INDEX IF NOT EXISTS sessions_ready ON sessions (ended_seq)
    WHERE ended = 1 AND exported = 0;
CREATE INDEX IF NOT EXISTS sessions_active ON sessions (last_active_at);
"""

_PAGES: dict[str, str] = {
    "all": "SELECT record FROM sessions WHERE created_seq > ? ORDER BY created_seq",
    "group": "SELECT record FROM sessions WHERE group_id = ? AND created_seq > ? "
             "ORDER BY created_seq",
    "identity": "SELECT record FROM sessions WHERE identity = ? AND created_seq > ? "
                "ORDER BY created_seq",
    "unexported": "SELECT record FROM sessions WHERE exported = 0 AND created_seq > ? "
                  "ORDER BY created_seq",
    "ready": "SELECT record FROM sessions WHERE ended = 1 AND exported = 0 AND ended_seq > ? "
             "ORDER BY ended_seq",
}
PAGE_QUERIES = {view: sql + " LIMIT ? OFFSET ?" for view, sql in _PAGES.items()}
"""One statement per view (tests check each reads an index)."""

IDLE_QUERY = ("SELECT record FROM sessions WHERE last_active_at <= ? "
              "ORDER BY last_active_at LIMIT ?")


def migrate(db: sqlite3.Connection) -> None:
    """Add the index columns (filled from the blobs) and indexes, once per file."""
    db.execute("BEGIN IMMEDIATE")  # another process may be migrating the same file
    have = {row[1] for row in db.execute("PRAGMA table_info(sessions)")}
    missing = [(name, kind) for name, kind in INDEX_COLUMNS if name not in have]
    if missing:
        for name, kind in missing:
            db.execute(f"ALTER TABLE sessions ADD COLUMN {name} {kind}")
        rows = db.execute("SELECT session_id, record FROM sessions").fetchall()
        for session_id, blob in rows:
            r = SessionRecord.from_dict(orjson.loads(blob))
            db.execute(
                "UPDATE sessions SET identity = ?, exported = ?, ended_seq = ?, "
                "last_active_at = ? WHERE session_id = ?",
                (r.identity, int(r.exported), r.ended_seq, r.last_active_at, session_id),
            )
    db.execute("COMMIT")
    db.executescript(_INDEXES)
    db.execute("INSERT OR IGNORE INTO counters (name, value) "
               "SELECT 'sessions', count(*) FROM sessions")
    db.execute("INSERT OR IGNORE INTO counters (name, value) VALUES ('version', 0)")


class SqliteReads:
    """The reads of a store's file (``sqlite_core.py``), each one read transaction of it."""

    def __init__(self, store: SqliteFile) -> None:
        self._store = store

    async def scan(
        self, view: View, *, key: str | None = None, after: int = -1, offset: int = 0,
        limit: int,
    ) -> builtins.list[SessionRecord]:
        keyed = view in ("group", "identity")

        def work(db: sqlite3.Connection) -> builtins.list[SessionRecord]:
            args = (key, after, limit, offset) if keyed else (after, limit, offset)
            rows = db.execute(PAGE_QUERIES[view], args).fetchall()
            return [SessionRecord.from_dict(orjson.loads(r[0])) for r in rows]

        return await self._store._read(work)

    async def count(self, view: View, *, key: str | None = None) -> int:
        def work(db: sqlite3.Connection) -> int:
            if view == "all":
                row = db.execute("SELECT value FROM counters WHERE name = 'sessions'").fetchone()
            else:
                column = {"group": "group_id", "identity": "identity"}[view]
                row = db.execute(f"SELECT count(*) FROM sessions WHERE {column} = ?",
                                 (key,)).fetchone()
            return int(row[0])

        return await self._store._read(work)

    async def idle(self, cutoff: float, limit: int) -> builtins.list[SessionRecord]:
        def work(db: sqlite3.Connection) -> builtins.list[SessionRecord]:
            rows = db.execute(IDLE_QUERY, (cutoff, limit)).fetchall()
            return [SessionRecord.from_dict(orjson.loads(r[0])) for r in rows]

        return await self._store._read(work)

    async def version(self) -> int:
        def work(db: sqlite3.Connection) -> int:
            return int(db.execute("SELECT value FROM counters WHERE name = 'version'")
                       .fetchone()[0])

        return await self._store._read(work)

    def watch(self) -> AbstractAsyncContextManager[Watch]:
        return signal_watch(self._store._signal, self.version, self._store._check_s)
