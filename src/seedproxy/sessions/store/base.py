"""The session store interface. Every store (memory, SQLite, Redis) passes one suite.

Atomicity is the store's job: ``allocate`` must hand out each counter index exactly
once across threads, tasks and (for shared stores) processes. Methods that name a
session that does not exist raise ``SessionNotFound``, except where noted.
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
"""An index of sessions a store keeps, each read a page at a time (``scan``):

- ``all``, ``group`` (``key``: a group id), ``identity`` (``key``): creation order;
- ``unexported``: sessions not exported (open or ended), creation order;
- ``ready``: ended sessions not exported, in the order they ended.

"Exported" means acknowledged (``ack``): a session under a live
lease is still in ``unexported``/``ready`` (a lease runs out by itself; ``held_until``
says which are held). The sequence of ``ready`` is ``ended_seq``; of the others,
``created_seq``."""

RETRY_MEMORY = 64
"""How many recent request digests a session remembers for SDK-retry matching."""


def not_found(session_id: str) -> SessionNotFound:
    return SessionNotFound(f"session {session_id!r} not found")


def over_capacity(max_open: int) -> OverCapacity:
    """The 429 of a create that would take the open sessions past ``max_open``."""
    return OverCapacity(f"at most {max_open} open sessions; end or delete some first")


class SessionStore(Protocol):
    async def create(
        self, record: SessionRecord, *, max_open: int | None = None, reserve: int = 1
    ) -> bool:
        """Insert ``record``, setting its ``created_seq``; False if the id is taken.
        With ``max_open``, raise ``over_capacity`` instead when the open sessions plus
        ``reserve`` (this one and any its caller will add next) exceed it: counted and
        inserted in one atomic step."""

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
        """Atomically give a request its slot.

        ``pinned`` uses that index and leaves the counter alone. Otherwise, when
        ``retry`` is set and ``digest`` matches a recent request, that request's slot
        comes back with ``reused=True``; else the counter's next index. With a
        ``content_key``, the same step numbers the slot's interaction among that key's:
        0 for the first, then 1, 2, ...; a reused slot gets its number back. All or
        nothing: a failure takes neither the index nor the number.

        ``created_seq``: the session the caller holds (another under its id is
        ``SessionNotFound``). ``after``: the record sequence number of the caller's view;
        when records newer than it are stored, the same step takes nothing and answers
        ``Stale`` with them (``changes``), so one round trip checks the view and seats.
        """

    async def occurrence(self, session_id: str, key: str, interaction_id: str) -> int:
        """Atomically number the interactions of one ``key``: 0 for the first, then 1,
        2, ...; an ``interaction_id`` numbered before gets its number back. (A request's
        own content key is numbered by ``allocate``, with its index.)"""

    async def record(self, session_id: str, interaction: Interaction, *,
                     link: Link | None = None, sent: Sent | None = None,
                     after: int | None = None) -> Recorded:
        """Store ``interaction`` (``codec.encode``: once, as what it adds to ``link``),
        replacing one with the same ``interaction_id``, under the session's next record
        sequence number. Durable stores return only once it is durable. ``current`` in
        the answer: no record newer than ``after`` was stored before this one."""

    async def interactions(self, session_id: str) -> builtins.list[Interaction]:
        """Return the session's interactions, whole, ordered by (request_index,
        interaction_id)."""

    async def changes(self, session_id: str, after: int) -> tuple[int, builtins.list[bytes]]:
        """One operation: the session's record sequence number and the stored blobs of
        the interactions recorded after sequence number ``after`` (every one for -1),
        each as last written. A sequence number never repeats within a session."""

    async def set_reward(
        self, session_id: str, reward: float, interaction_id: str | None
    ) -> str | None:
        """Set an interaction's reward (the last one's when None) and the session's.
        Returns the interaction id rewarded, or None if the session has none."""

    async def end(
        self, session_id: str, *, abandoned_before: float | None = None
    ) -> SessionRecord:
        """Mark the session ended (idempotent; ``end_status`` "ended") and return it.
        With ``abandoned_before`` (wall-clock seconds), end it as "abandoned", and only
        if it is open and was last active at or before then; else return it unchanged.
        The check and the end are one atomic step, so a request that arrives meanwhile
        keeps its session open."""

    async def lease(
        self, batch_id: str, records: builtins.list[SessionRecord], *,
        now: float, until: float, remove: bool, named: bool,
    ) -> builtins.list[str]:
        """Atomically lease ``records`` (in delivery order) to a new ``batch_id`` until
        ``until``, all or none (see ``leases.py``); an empty batch is recorded too.
        Returns the ids refused: gone (or a newer session under the id), under another
        live lease at ``now``, or, unless ``named``, already exported. Empty: leased."""

    async def ack(self, batch_id: str, now: float) -> bool:
        """The batch was delivered: mark its sessions exported (delete them when it was
        leased with ``remove``) and release their lease. Idempotent, also after the
        lease ran out; False for an unknown (or long forgotten) batch."""

    async def delete(self, session_id: str) -> bool:
        """Forget the session; False when it was unknown."""

    async def count_open(self) -> int:
        """Return how many sessions are not ended."""

    async def scan(
        self, view: View, *, key: str | None = None, after: int = -1, offset: int = 0,
        limit: int,
    ) -> builtins.list[SessionRecord]:
        """Up to ``limit`` sessions of ``view`` whose sequence number is above ``after``,
        skipping the first ``offset`` of them, in the view's order. Costs what it returns
        (plus ``offset``), never what the store holds."""

    async def count(self, view: View, *, key: str | None = None) -> int:
        """How many sessions ``view`` holds (``all``, ``group``, ``identity``)."""

    async def idle(self, cutoff: float, limit: int) -> builtins.list[SessionRecord]:
        """Up to ``limit`` sessions last active at or before ``cutoff`` (wall-clock
        seconds), least recently active first: the TTL sweep's index."""

    async def held_until(self, session_ids: builtins.list[str], now: float) -> dict[str, float]:
        """Those of ``session_ids`` under a live lease at ``now``, with when it ends."""

    async def version(self) -> int:
        """The store-wide change counter (see ``changes.py``); O(1)."""

    def watch(self) -> AbstractAsyncContextManager[Watch]:
        """Open a ``Watch`` on the store's changes (before reading what it waits on)."""

    async def close(self) -> None:
        """Release connections."""
