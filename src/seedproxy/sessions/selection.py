"""Choosing which sessions an export takes, and in which order (``export.py`` leases them).

Deterministic mode takes sessions in creation order and never skips an earlier
session for one that ended first (AReaL's ``_select_results``): the batch is the
first ``count`` sessions not exported and not under a live lease (all without
``count``), and only its ended prefix is taken; its open sessions are what the export
waits on. One of those idle (no request, nothing recorded) for ``abandon_after_s`` is
ended there and then as ``abandoned`` (``SessionStore.end``, atomic against a request
arriving meanwhile), so an agent that never ends its session cannot stall every
export. Only sessions an export reaches are checked: the cost is the batch, never the
store. Without determinism the batch is the first ``count`` sessions to end, in the
order they ended.

``skip_abandoned``: abandoned sessions are leased with the batch (an ack takes them
out of later exports too) but not delivered, and do not count towards ``count``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from ..errors import BadRequest, SessionNotFound
from .record import SessionRecord
from .store.base import SessionStore, View

__all__ = ["ABANDONED", "Ask", "Selection", "select_once"]

ABANDONED = "abandoned"
"""``SessionRecord.end_status`` of a session ended for being idle (see above)."""

PAGE = 256
"""Sessions read from the store's index per step of a selection."""

log = logging.getLogger("seedproxy.export")


@dataclass(frozen=True, slots=True)
class Ask:
    """What an export asks for (``lease_batch``'s arguments)."""

    session_ids: list[str] | None = None
    group_id: str | None = None
    count: int | None = None
    deterministic: bool = True
    remove: bool = False
    abandon_after_s: float | None = None
    """An open session an export waits on, idle this long, is ended as abandoned
    (None: never)."""
    skip_abandoned: bool = False


@dataclass(slots=True)
class Selection:
    chosen: list[SessionRecord] = field(default_factory=list)
    """What the batch leases, in delivery order (skipped abandoned ones included)."""
    complete: bool = True
    wake_at: list[float] = field(default_factory=list)
    """When the selection may change with no write to wake a waiting export: a live
    lease that kept a candidate out runs out, a session waited on becomes abandoned."""
    waiting: list[SessionRecord] = field(default_factory=list)
    """Open sessions of the batch that the export waits on (deterministic mode)."""
    skip_abandoned: bool = False

    def delivered(self) -> list[SessionRecord]:
        return [r for r in self.chosen if not self.skips(r)]

    def skipped(self) -> list[SessionRecord]:
        return [r for r in self.chosen if self.skips(r)]

    def skips(self, record: SessionRecord) -> bool:
        """Whether ``record`` is leased without being delivered (nor counted)."""
        return self.skip_abandoned and record.end_status == ABANDONED


class _Batch:
    """A batch being chosen from candidates offered one at a time in the mode's order."""

    def __init__(self, store: SessionStore, ask: Ask, now: float, *, prefix: bool) -> None:
        self._store, self._ask, self._now, self._prefix = store, ask, now, prefix
        self.selection = Selection(skip_abandoned=ask.skip_abandoned)
        self._counted = 0

    async def offer(self, record: SessionRecord) -> bool:
        """Take the next candidate into account; True once the batch is decided (``count``
        candidates counted, or, without ``count``, the first open one in a prefix)."""
        ask, selection = self._ask, self.selection
        settled = await self._settle(record) if self._prefix else record
        if settled is None:
            return False  # deleted meanwhile
        if not settled.ended:
            selection.waiting.append(settled)
            if ask.abandon_after_s is not None:
                selection.wake_at.append(settled.last_active_at + ask.abandon_after_s)
            if ask.count is None:
                return True
        elif not selection.waiting:
            selection.chosen.append(settled)
        if not selection.skips(settled):
            self._counted += 1
        return ask.count is not None and self._counted >= ask.count

    def done(self) -> Selection:
        ask, selection = self._ask, self.selection
        selection.complete = ask.count is None or (
            not selection.waiting and self._counted >= ask.count)
        return selection

    async def _settle(self, record: SessionRecord) -> SessionRecord | None:
        """``record``, ended as abandoned first when it is open and idle past the
        abandon time; None when it was deleted meanwhile."""
        after_s = self._ask.abandon_after_s
        if record.ended or after_s is None or record.last_active_at > self._now - after_s:
            return record
        try:
            ended = await self._store.end(record.session_id,
                                          abandoned_before=self._now - after_s)
        except SessionNotFound:
            return None
        if ended.end_status == ABANDONED and ended.ended_seq != record.ended_seq:
            log.warning("session %s ended as abandoned: idle %.0f s (abandon_after_s %g) "
                        "while an export waited on it", record.session_id,
                        self._now - record.last_active_at, after_s)
        return ended


async def select_once(store: SessionStore, ask: Ask, now: float) -> Selection:
    """One look at the store: the batch ``ask`` would take at ``now``."""
    if ask.session_ids is not None:
        return await _named(store, ask.session_ids, ask.remove, now)
    if ask.group_id is not None:  # one group's sessions: few, read together
        unexported = [r for r in await store.list(ask.group_id) if not r.exported]
        held = await store.held_until([r.session_id for r in unexported], now)
        pending = [r for r in unexported if r.session_id not in held]
        if not ask.deterministic:
            pending = sorted((r for r in pending if r.ended), key=lambda r: r.ended_seq or 0)
        batch = _Batch(store, ask, now, prefix=ask.deterministic)
        for record in pending:
            if await batch.offer(record):
                break
        selection = batch.done()
        selection.wake_at.extend(held.values())
        return selection
    view: View = "unexported" if ask.deterministic else "ready"
    return await _walk(store, view, _Batch(store, ask, now, prefix=ask.deterministic), now)


async def _named(store: SessionStore, session_ids: list[str], remove: bool,
                 now: float) -> Selection:
    named = dict.fromkeys(session_ids)  # each session once, however often it is named
    found = [r for r in [await store.get(s) for s in named] if r is not None]
    if remove and (still_open := [r.session_id for r in found if not r.ended]):
        raise BadRequest(f"remove would delete open session(s) {', '.join(still_open)} "
                         "while their agents may still send turns (the next would start "
                         "them again at index 0): end them first", param="remove")
    held = await store.held_until([r.session_id for r in found], now)
    return Selection(sorted((r for r in found if r.session_id not in held),
                            key=lambda r: r.created_seq), True, list(held.values()))


async def _walk(store: SessionStore, view: View, batch: _Batch, now: float) -> Selection:
    """Read ``view`` a page at a time, skipping sessions under a live lease, until the
    batch is decided: the cost is the batch plus the leased ones passed, not what the
    store holds."""
    lease_ends: list[float] = []
    after = -1
    while True:
        page = await store.scan(view, after=after, limit=PAGE)
        held = await store.held_until([r.session_id for r in page], now)
        decided = False
        for record in page:
            if record.session_id in held:
                lease_ends.append(held[record.session_id])
            elif await batch.offer(record):
                decided = True
                break
        if decided or len(page) < PAGE:
            selection = batch.done()
            selection.wake_at.extend(lease_ends)
            return selection
        last = page[-1]
        after = (last.ended_seq or 0) if view == "ready" else last.created_seq
