"""The session store interface. Every store (memory, SQLite, Redis) passes one suite.

Atomicity is the store's job: ``allocate`` hands out each index exactly once across
threads, tasks and (shared stores) processes. A method naming an unknown session
raises ``SessionNotFound``, except where noted.
"""

from __future__ import annotations

import builtins
from contextlib import AbstractAsyncContextManager
from typing import Literal, Protocol

from ...errors import OverCapacity, SessionNotFound
from ..codec import Link, Sent
from ..interaction import Interaction
from ..record import Recorded, SessionRecord, Slot, Stale
from .changes import Watch

__all__ = ["RETRY_MEMORY", "SessionStore", "View", "not_found", "over_capacity"]

View = Literal["all", "group", "identity", "unexported", "ready"]
"""An index of sessions a store keeps, read a page at a time (``scan``): ``all``,
``group``/``identity`` (``key``), ``unexported`` (open or ended) by ``created_seq``;
``ready`` (ended, not exported) by ``ended_seq``. "Exported" means acknowledged
(``ack``): a leased session stays in ``unexported``/``ready`` (``held_until``)."""

RETRY_MEMORY = 64
"""How many recent request digests a session remembers for SDK-retry matching."""


def not_found(session_id: str, param: str | None = None) -> SessionNotFound:
    return SessionNotFound(f"session {session_id!r} not found", param=param)


def over_capacity(max_open: int) -> OverCapacity:
    """The 429 of a create that would take the open sessions past ``max_open``."""
    return OverCapacity(f"at most {max_open} open sessions; end or delete some first")


class SessionStore(Protocol):
    async def create(
        self, record: SessionRecord, *, max_open: int | None = None, reserve: int = 1
    ) -> bool:
        """Insert ``record``, setting its ``created_seq``; False if the id is taken.
        With ``max_open``, ``over_capacity`` when the open sessions plus ``reserve`` (this
        one and those its caller adds next) exceed it, counted and inserted atomically."""

    async def get(self, session_id: str) -> SessionRecord | None:
        """Return the session, or None when unknown."""

    async def find_by_key(self, api_key: str) -> SessionRecord | None:
        """Return the session owning ``api_key``, or None."""

    async def list(self, group_id: str | None = None) -> builtins.list[SessionRecord]:
        """Return sessions (of one group, if given) in creation order."""

    async def allocate(
        self, session_id: str, *, digest: bytes, retry: bool, pinned: int | None,
        content_key: str | None = None, created_seq: int | None = None,
        after: int | None = None,
    ) -> Slot | Stale:
        """Atomically give a request its slot: with ``retry`` and a ``digest`` of a
        recent request, that request's slot (``reused=True``); else ``pinned``'s index
        (the counter left alone); else the counter's next. With a ``content_key``, the
        same step numbers the interaction among that key's (0, 1, ...; a reused slot
        gets its number back). A failure takes neither index nor number.

        ``created_seq``: the session the caller holds (another under its id is
        ``SessionNotFound``). ``after``: the sequence number of the caller's view; when
        newer records are stored, nothing is taken and ``Stale`` answers them
        (``changes``): one round trip checks the view and seats."""

    async def occurrence(self, session_id: str, key: str, interaction_id: str) -> int:
        """Atomically number the interactions of one ``key`` as ``allocate`` does."""

    async def record(self, session_id: str, interaction: Interaction, *,
                     link: Link | None = None, sent: Sent | None = None,
                     after: int | None = None) -> Recorded:
        """Store ``interaction`` (``codec.encode``, as what it adds to ``link``), replacing
        one with its ``interaction_id``, under the session's next record sequence
        number; durably, in durable stores. ``current``: no record newer than ``after``
        was stored before it."""

    async def interactions(self, session_id: str) -> builtins.list[Interaction]:
        """Return the session's interactions, whole, ordered by (request_index,
        interaction_id)."""

    async def changes(self, session_id: str, after: int) -> tuple[int, builtins.list[bytes]]:
        """One operation: the session's record sequence number and the blobs recorded
        after ``after`` (all for -1), each as last written. Sequence numbers never repeat
        within a session."""

    async def set_reward(
        self, session_id: str, reward: float, interaction_id: str | None
    ) -> str | None:
        """Set an interaction's reward (the last one's when None) and the session's;
        the interaction id rewarded, None when the session has none."""

    async def end(
        self, session_id: str, *, abandoned_before: float | None = None
    ) -> SessionRecord:
        """End the session (idempotent; ``end_status`` "ended") and return it. With
        ``abandoned_before`` (wall-clock seconds): as "abandoned", only if open and last
        active at or before then, checked and ended atomically (a request arriving
        meanwhile keeps it open)."""

    async def lease(
        self, batch_id: str, records: builtins.list[SessionRecord], *,
        now: float, until: float, remove: bool, named: bool,
    ) -> builtins.list[str]:
        """Atomically lease ``records`` (delivery order) to a new ``batch_id`` until
        ``until``, all or none (``leases.py``; an empty batch too). The ids refused: gone
        (or a newer session under the id), under a live lease at ``now``, or, unless
        ``named``, exported. Empty: leased."""

    async def ack(self, batch_id: str, now: float) -> bool:
        """The batch was delivered: its sessions exported (deleted, when leased with
        ``remove``) and released. Idempotent, also after the lease ran out; False for an
        unknown (or forgotten) batch."""

    async def delete(self, session_id: str) -> bool:
        """Forget the session; False when it was unknown."""

    async def count_open(self) -> int:
        """Return how many sessions are not ended."""

    async def scan(
        self, view: View, *, key: str | None = None, after: int = -1, offset: int = 0,
        limit: int,
    ) -> builtins.list[SessionRecord]:
        """Up to ``limit`` sessions of ``view`` with sequence numbers above ``after``, past
        the first ``offset``, in order; costs what it returns (and ``offset``), never what
        the store holds."""

    async def count(self, view: View, *, key: str | None = None) -> int:
        """How many sessions ``view`` holds (``all``, ``group``, ``identity``)."""

    async def idle(self, cutoff: float, limit: int) -> builtins.list[SessionRecord]:
        """Up to ``limit`` sessions last active at or before ``cutoff`` (wall clock),
        least recently active first: the TTL sweep's index."""

    async def held_until(self, session_ids: builtins.list[str], now: float) -> dict[str, float]:
        """Those of ``session_ids`` under a live lease at ``now``, with when it ends."""

    async def version(self) -> int:
        """The store-wide change counter (see ``changes.py``); O(1)."""

    def watch(self) -> AbstractAsyncContextManager[Watch]:
        """A ``Watch`` on the store's changes (opened before reading what it waits on)."""

    async def close(self) -> None:
        """Release connections."""
