"""Opening a SQLite store's file: the ``sqlite://`` path form, the schema, the
migrations a file from an older seedproxy gets, and the file's identity.

The file that was opened: each transaction first checks that its path still names
that file (same device and inode), so a file deleted or replaced under a running proxy
is a ``StoreError`` (503) on every request and on ``/readyz``, never a store that goes
on writing to an unlinked file a restart cannot see. Every file holds a random
``epoch``, drawn once when the file is first opened and kept in it: records carry it,
so the records of a new file (whose indices start again at 0, with the same seeds for
the same identity) are told apart from an old file's. Seeds never depend on it.
"""

from __future__ import annotations

import logging
import os
import secrets
import sqlite3
from dataclasses import dataclass

import orjson

from ...errors import StoreError
from ..record import SessionRecord

__all__ = ["FileIdentity", "open_file", "path_of"]

log = logging.getLogger("seedproxy")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sessions (session_id TEXT PRIMARY KEY, api_key TEXT NOT NULL,
    group_id TEXT, created_seq INTEGER NOT NULL, ended INTEGER NOT NULL DEFAULT 0,
    record BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS sessions_key ON sessions (api_key);
CREATE INDEX IF NOT EXISTS sessions_group ON sessions (group_id, created_seq);
CREATE INDEX IF NOT EXISTS sessions_created ON sessions (created_seq);
CREATE TABLE IF NOT EXISTS recent (session_id TEXT NOT NULL, digest BLOB NOT NULL,
    request_index INTEGER NOT NULL, interaction_id TEXT NOT NULL, clock INTEGER NOT NULL,
    PRIMARY KEY (session_id, digest));
CREATE TABLE IF NOT EXISTS pins (session_id TEXT NOT NULL, request_index INTEGER NOT NULL,
    used INTEGER NOT NULL, PRIMARY KEY (session_id, request_index));
CREATE TABLE IF NOT EXISTS occurrences (session_id TEXT NOT NULL,
    interaction_id TEXT NOT NULL, key TEXT NOT NULL, occurrence INTEGER NOT NULL,
    PRIMARY KEY (session_id, interaction_id));
CREATE INDEX IF NOT EXISTS occurrences_key ON occurrences (session_id, key);
CREATE TABLE IF NOT EXISTS interactions (session_id TEXT NOT NULL,
    interaction_id TEXT NOT NULL, request_index INTEGER NOT NULL, data BLOB NOT NULL,
    seq INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (session_id, interaction_id));
CREATE TABLE IF NOT EXISTS leases (session_id TEXT PRIMARY KEY, batch_id TEXT NOT NULL,
    until REAL NOT NULL);
CREATE INDEX IF NOT EXISTS leases_until ON leases (until);
CREATE TABLE IF NOT EXISTS batches (batch_id TEXT PRIMARY KEY, data BLOB NOT NULL,
    keep_until REAL NOT NULL);
CREATE INDEX IF NOT EXISTS batches_keep ON batches (keep_until);
"""

_SEQ_INDEX = "CREATE INDEX IF NOT EXISTS interactions_seq ON interactions (session_id, seq)"
"""``changes`` reads a session's newest records through it (a file from before the
column gets the column, its rows sequence number 0)."""

_INDEX_COLUMNS = (("identity", "TEXT"), ("exported", "INTEGER NOT NULL DEFAULT 0"),
                  ("ended_seq", "INTEGER"), ("last_active_at", "REAL NOT NULL DEFAULT 0"))
"""Beside the record's blob, the columns the views (``sqlite_core.py``) need, written
with the blob in the same statement (``SqliteFile._save``)."""

_INDEXES = """
CREATE INDEX IF NOT EXISTS sessions_identity ON sessions (identity, created_seq);
CREATE INDEX IF NOT EXISTS sessions_unexported ON sessions (created_seq) WHERE exported = 0;
CREATE INDEX IF NOT EXISTS sessions_ready ON sessions (ended_seq)
    WHERE ended = 1 AND exported = 0;
CREATE INDEX IF NOT EXISTS sessions_active ON sessions (last_active_at);
"""


def path_of(url: str) -> str:
    """``sqlite:///rel.db`` -> ``rel.db``; ``sqlite:////abs/x.db`` -> ``/abs/x.db``."""
    path = url.split("://", 1)[1]
    path = path[1:] if path.startswith("/") else path
    if not path:
        raise ValueError("sqlite URL needs a path: sqlite:///PATH.db")
    return path


def open_file(path: str) -> tuple[sqlite3.Connection, FileIdentity | None, str]:
    """The open database (schema made or migrated), its file identity and its epoch;
    ``StoreError`` naming the absolute path when it cannot be opened."""
    fresh = not os.path.exists(path)
    try:
        db = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.executescript(_SCHEMA)
        columns = {row[1] for row in db.execute("PRAGMA table_info(interactions)")}
        if "seq" not in columns:
            db.execute("ALTER TABLE interactions ADD COLUMN seq INTEGER NOT NULL DEFAULT 0")
        db.execute(_SEQ_INDEX)
        db.execute("INSERT OR IGNORE INTO meta (name, value) VALUES ('epoch', ?)",
                   (secrets.token_hex(8),))  # drawn the first time the file is opened
        epoch = str(db.execute("SELECT value FROM meta WHERE name = 'epoch'").fetchone()[0])
        _migrate(db)
    except sqlite3.Error as exc:
        where = os.path.abspath(path)
        form = ("" if os.path.isabs(path) else
                f" (a relative path; an absolute one is sqlite:///{where})")
        raise StoreError(f"cannot open SQLite store {where}{form}: {exc}") from exc
    if fresh:
        log.info("created SQLite store %s (store epoch %s): indices start at 0",
                 os.path.abspath(path), epoch)
    return db, FileIdentity.of(path), epoch


def _migrate(db: sqlite3.Connection) -> None:
    """Add the index columns (filled from the blobs), indexes and counters a file from
    before them lacks, once per file."""
    db.execute("BEGIN IMMEDIATE")  # another process may be migrating the same file
    have = {row[1] for row in db.execute("PRAGMA table_info(sessions)")}
    missing = [(name, kind) for name, kind in _INDEX_COLUMNS if name not in have]
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
               "SELECT 'open', count(*) FROM sessions WHERE ended = 0")
    db.execute("INSERT OR IGNORE INTO counters (name, value) "
               "SELECT 'sessions', count(*) FROM sessions")
    db.execute("INSERT OR IGNORE INTO counters (name, value) VALUES ('version', 0)")


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
