"""Opening a SQLite store's file: the ``sqlite://`` path form, the schema, and the
migrations a file from an older seedproxy gets (``sqlite.py`` runs the store).
"""

from __future__ import annotations

import logging
import os
import sqlite3

from ...errors import StoreError
from .sqlite_core import META_SCHEMA, FileIdentity, file_epoch
from .sqlite_leases import LEASE_SCHEMA
from .sqlite_reads import migrate

__all__ = ["open_file", "path_of"]

log = logging.getLogger("seedproxy")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS sessions (
    session_id TEXT PRIMARY KEY,
    api_key TEXT NOT NULL,
    group_id TEXT,
    created_seq INTEGER NOT NULL,
    ended INTEGER NOT NULL DEFAULT 0,
    record BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS sessions_key ON sessions (api_key);
CREATE INDEX IF NOT EXISTS sessions_group ON sessions (group_id, created_seq);
CREATE INDEX IF NOT EXISTS sessions_created ON sessions (created_seq);
CREATE TABLE IF NOT EXISTS recent (
    session_id TEXT NOT NULL,
    digest BLOB NOT NULL,
    request_index INTEGER NOT NULL,
    interaction_id TEXT NOT NULL,
    clock INTEGER NOT NULL,
    PRIMARY KEY (session_id, digest)
);
CREATE TABLE IF NOT EXISTS pins (
    session_id TEXT NOT NULL,
    request_index INTEGER NOT NULL,
    used INTEGER NOT NULL,
    PRIMARY KEY (session_id, request_index)
);
CREATE TABLE IF NOT EXISTS occurrences (
    session_id TEXT NOT NULL,
    interaction_id TEXT NOT NULL,
    key TEXT NOT NULL,
    occurrence INTEGER NOT NULL,
    PRIMARY KEY (session_id, interaction_id)
);
CREATE INDEX IF NOT EXISTS occurrences_key ON occurrences (session_id, key);
CREATE TABLE IF NOT EXISTS interactions (
    session_id TEXT NOT NULL,
    interaction_id TEXT NOT NULL,
    request_index INTEGER NOT NULL,
    data BLOB NOT NULL,
    seq INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (session_id, interaction_id)
);
"""

_SEQ_INDEX = "CREATE INDEX IF NOT EXISTS interactions_seq ON interactions (session_id, seq)"
"""``changes`` reads a session's newest records through it (a file from before the
column gets the column, its rows sequence number 0)."""


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
        db.executescript(_SCHEMA + LEASE_SCHEMA + META_SCHEMA)
        columns = {row[1] for row in db.execute("PRAGMA table_info(interactions)")}
        if "seq" not in columns:
            db.execute("ALTER TABLE interactions ADD COLUMN seq INTEGER NOT NULL DEFAULT 0")
        db.execute(_SEQ_INDEX)
        epoch = file_epoch(db)
        # The open-session count is kept as sessions change (count_open is O(1));
        # a file from before it existed gets it counted once, here.
        db.execute(
            "INSERT OR IGNORE INTO counters (name, value) "
            "SELECT 'open', count(*) FROM sessions WHERE ended = 0"
        )
        migrate(db)
    except sqlite3.Error as exc:
        where = os.path.abspath(path)
        form = ("" if os.path.isabs(path) else
                f" (a relative path; an absolute one is sqlite:///{where})")
        raise StoreError(f"cannot open SQLite store {where}{form}: {exc}") from exc
    if fresh:
        log.info("created SQLite store %s (store epoch %s): indices start at 0",
                 os.path.abspath(path), epoch)
    return db, FileIdentity.of(path), epoch
