"""The SQLite store's reads: its indexes (``base.View``), expiry order and change counter.

Each view is one index of the ``sessions`` table (partial ones for ``unexported`` and
``ready``; ``sqlite_open.py`` makes them), so a page is an index range read that costs
what it returns. Counters (table ``counters``): ``sessions`` (the total), ``open`` and
``version`` (see ``changes.py``), changed in the transaction that changes a session. A
waiting export in this process is woken after the commit; one in another process on
the same file sees ``version`` move within ``check_s``.
"""

from __future__ import annotations

import builtins
import sqlite3
from contextlib import AbstractAsyncContextManager

from ..record import SessionRecord
from .base import View
from .changes import Watch, signal_watch
from .sqlite_core import SqliteFile, records

__all__ = ["IDLE_QUERY", "PAGE_QUERIES", "SqliteReads"]

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


class SqliteReads(SqliteFile):
    """The reads of a store's file, each one read transaction of it."""

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
