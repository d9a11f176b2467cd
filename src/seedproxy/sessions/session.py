"""A thread-safe, in-process session: the memory store's unit of state."""

from __future__ import annotations

import copy
import operator
import threading
import time
from collections import OrderedDict
from dataclasses import fields

from ..errors import SessionNotFound
from .codec import Link, Sent, encode, resolve, with_reward
from .interaction import Interaction
from .record import Recorded, SessionRecord, Slot, Stale, apply_summary

__all__ = ["Session"]

_NAMES = tuple(f.name for f in fields(SessionRecord))
_RECORD_FIELDS = operator.attrgetter(*_NAMES)
_METADATA = _NAMES.index("metadata")


class Session:
    """One rollout's live state. Every method is atomic under the session's lock,
    so threads and asyncio tasks may share a ``Session`` freely."""

    def __init__(self, record: SessionRecord, *, retry_memory: int = 64) -> None:
        self._record = record
        self._lock = threading.Lock()
        self._blobs: dict[str, tuple[int, int, bytes]] = {}
        """interaction id -> (request_index, record sequence number, stored blob)."""
        self._seq = 0
        self._recent: OrderedDict[bytes, Slot] = OrderedDict()
        self._retry_memory = retry_memory
        self._pins: dict[int, int] = {}
        self._key_counts: dict[str, int] = {}
        self._occurrences: dict[str, int] = {}  # interaction id -> its key's occurrence

    @property
    def created_seq(self) -> int:
        return self._record.created_seq

    def snapshot(self) -> SessionRecord:
        """Return a copy of the record, safe to read without the lock."""
        with self._lock:
            record = self._record
            # Fields by attrgetter + a metadata copy: same result as a to_dict round
            # trip, and cheaper than it or dataclasses.replace.
            values = list(_RECORD_FIELDS(record))
            values[_METADATA] = copy.deepcopy(record.metadata) if record.metadata else {}
            return SessionRecord(*values)

    def allocate(self, *, digest: bytes, retry: bool, pinned: int | None,
                 content_key: str | None = None, after: int | None = None) -> Slot | Stale:
        """See ``SessionStore.allocate``."""
        with self._lock:
            if after is not None and self._newer(after):
                return Stale(*self._changes(after))
            if retry and digest in self._recent:
                self._recent.move_to_end(digest)
                kept = self._recent[digest]
                return self._seat(Slot(kept.index, kept.interaction_id, reused=True),
                                  content_key)
            if pinned is not None:
                extra = self._pins.get(pinned, 0)
                self._pins[pinned] = extra + 1
                slot = Slot(pinned, f"i{pinned}.p{extra}")
            else:  # the next index: 0, 1, 2, ... with no gaps and no repeats
                index = self._record.next_index
                self._record.next_index = index + 1
                slot = Slot(index, f"i{index}")
            self._record.last_active_at = time.time()
            self._recent[digest] = slot
            if len(self._recent) > self._retry_memory:
                self._recent.popitem(last=False)
            return self._seat(slot, content_key)

    def _seat(self, slot: Slot, key: str | None) -> Slot:
        """``slot`` with its content key's occurrence (under the lock)."""
        if key is None:
            return slot
        return Slot(slot.index, slot.interaction_id, slot.reused,
                    self._number(key, slot.interaction_id))

    def occurrence(self, key: str, interaction_id: str) -> int:
        """See ``SessionStore.occurrence``."""
        with self._lock:
            return self._number(key, interaction_id)

    def _number(self, key: str, interaction_id: str) -> int:
        if (known := self._occurrences.get(interaction_id)) is not None:
            return known
        number = self._key_counts.get(key, 0)
        self._key_counts[key] = number + 1
        self._occurrences[interaction_id] = number
        return number

    def record(self, interaction: Interaction, link: Link | None = None,
               sent: Sent | None = None, after: int | None = None) -> Recorded:
        blob = encode(interaction, link, sent)
        with self._lock:
            current = after is not None and not self._newer(after)
            new = interaction.interaction_id not in self._blobs
            self._seq += 1
            self._blobs.pop(interaction.interaction_id, None)  # the dict stays in seq order
            self._blobs[interaction.interaction_id] = (interaction.request_index, self._seq, blob)
            apply_summary(self._record, interaction, new=new)
            self._record.last_active_at = time.time()
            return Recorded(self._seq, blob, current)

    def interactions(self) -> list[Interaction]:
        with self._lock:
            blobs = [b for _, _, b in self._blobs.values()]
        return resolve(blobs)

    def changes(self, after: int) -> tuple[int, list[bytes]]:
        """See ``SessionStore.changes``."""
        with self._lock:
            return self._changes(after)

    def _changes(self, after: int) -> tuple[int, list[bytes]]:
        newer: list[bytes] = []
        for _, seq, blob in reversed(self._blobs.values()):  # newest first: O(changes)
            if seq <= after:
                break
            newer.append(blob)
        return self._seq, newer[::-1]

    def _newer(self, after: int) -> bool:
        """Whether a record newer than ``after`` is stored (under the lock; O(1): the
        dict is in sequence order)."""
        return bool(self._blobs) and next(reversed(self._blobs.values()))[1] > after

    def set_reward(self, reward: float, interaction_id: str | None) -> str | None:
        """See ``SessionStore.set_reward``."""
        with self._lock:
            if interaction_id is not None and interaction_id not in self._blobs:
                raise SessionNotFound(f"interaction {interaction_id!r} not found in "
                                      f"{self._record.session_id!r}")
            self._record.reward = reward
            if interaction_id is None:
                if not self._blobs:
                    return None
                interaction_id = max(self._blobs, key=lambda i: (self._blobs[i][0], i))
            index, seq, blob = self._blobs[interaction_id]
            self._blobs[interaction_id] = (index, seq, with_reward(blob, reward))  # in place
            return interaction_id

    def stored_bytes(self) -> int:
        """The bytes of the session's stored interaction records."""
        with self._lock:
            return sum(len(b) for _, _, b in self._blobs.values())

    def end(self, ended_seq: int, abandoned_before: float | None = None) -> SessionRecord:
        """See ``SessionStore.end``."""
        with self._lock:
            record = self._record
            if not record.ended and (abandoned_before is None
                                     or record.last_active_at <= abandoned_before):
                record.ended = True
                record.ended_seq = ended_seq
                record.end_status = "ended" if abandoned_before is None else "abandoned"
            return SessionRecord.from_dict(record.to_dict())

    def mark_exported(self) -> None:
        with self._lock:
            self._record.exported = True
