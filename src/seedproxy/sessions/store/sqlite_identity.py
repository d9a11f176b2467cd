"""Which file a SQLite store is, and which store epoch that file holds.

Invariants: a store serves only from the file it opened. Each transaction first checks
that its path still names that file (same device and inode), so a file deleted or
replaced under a running proxy is a ``StoreError`` (503) on every request and on
``/readyz``, never a store that goes on writing to an unlinked file a restart cannot
see. Every file holds a random ``epoch``, drawn once when the file is first opened and
kept in it: records carry it, so the records of a new file (whose indices start again
at 0, with the same seeds for the same identity) are told apart from an old file's.
Seeds never depend on it.
"""

from __future__ import annotations

import os
import secrets
import sqlite3
from dataclasses import dataclass

from ...errors import StoreError

__all__ = ["META_SCHEMA", "FileIdentity", "file_epoch"]

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
