"""The memory store's indexes (``base.View``), activity order and change signal.

Each view is a ``SeqIndex`` kept as sessions change, under the store's lock; the
activity order is an ``OrderedDict`` moved to its end on each request or record, so
the TTL sweep reads the least recently active first (every session shares one TTL,
so activity order is expiry order).
"""

from __future__ import annotations

from collections import OrderedDict
from itertools import islice

from ..record import SessionRecord
from .base import View
from .changes import ChangeSignal
from .seq_index import SeqIndex

__all__ = ["MemoryIndexes"]


class MemoryIndexes:
    """The memory store's views, activity order and change counter. Not thread-safe
    on its own: the store calls it under its lock."""

    def __init__(self) -> None:
        self._all = SeqIndex()
        self._groups: dict[str, SeqIndex] = {}
        self._identities: dict[str, SeqIndex] = {}
        self._unexported = SeqIndex()
        self._ready = SeqIndex()
        self.activity: OrderedDict[str, None] = OrderedDict()
        """Session ids, least recently active first."""
        self.version = 0
        self.signal = ChangeSignal()

    def changed(self, *, wake: bool = True) -> None:
        """The listing changed; ``wake``: an export's choice may have too (a session
        created, ended, exported or deleted), so waiting exports look again."""
        self.version += 1
        if wake:
            self.signal.notify()

    def created(self, record: SessionRecord) -> None:
        seq, sid = record.created_seq, record.session_id
        self._all.add(seq, sid)
        if record.group_id is not None:
            self._groups.setdefault(record.group_id, SeqIndex()).add(seq, sid)
        self._identities.setdefault(record.identity, SeqIndex()).add(seq, sid)
        if not record.exported:
            self._unexported.add(seq, sid)
            if record.ended and record.ended_seq is not None:
                self._ready.add(record.ended_seq, sid)
        self.activity[sid] = None
        self.changed()

    def ended(self, session_id: str, ended_seq: int) -> None:
        self._ready.add(ended_seq, session_id)
        self.changed()

    def exported(self, session_id: str) -> None:
        self._unexported.remove(session_id)
        self._ready.remove(session_id)
        self.changed()

    def deleted(self, record: SessionRecord) -> None:
        sid = record.session_id
        _drop(self._groups, record.group_id, sid)
        _drop(self._identities, record.identity, sid)
        for view in (self._all, self._unexported, self._ready):
            view.remove(sid)
        self.activity.pop(sid, None)
        self.changed()

    def touch(self, session_id: str) -> None:
        if session_id in self.activity:
            self.activity.move_to_end(session_id)

    def _view(self, view: View, key: str | None) -> SeqIndex | None:
        if view == "group":
            return self._groups.get(key or "")
        if view == "identity":
            return self._identities.get(key or "")
        return {"all": self._all, "unexported": self._unexported, "ready": self._ready}[view]

    def ids(self, view: View, key: str | None, after: int, offset: int, limit: int) -> list[str]:
        """The ids of ``SessionStore.scan``'s page."""
        index = self._view(view, key)
        return [] if index is None else list(islice(index.after(after), offset, offset + limit))

    def count(self, view: View, key: str | None) -> int:
        index = self._view(view, key)
        return 0 if index is None else len(index)


def _drop(table: dict[str, SeqIndex], key: str | None, session_id: str) -> None:
    index = table.get(key) if key is not None else None
    if index is not None:
        index.remove(session_id)
        if not index:
            del table[key]  # type: ignore[arg-type]  # key is not None here
