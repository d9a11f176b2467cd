"""Choosing which sessions an export takes, and in which order; leasing them.

Deterministic mode takes sessions in creation order and never skips an earlier
session for one that ended first (AReaL's ``_select_results``): the batch is the
first ``count`` sessions not exported and not under a live lease (all of them without
``count``), and only its ended prefix is ever taken. Without determinism the batch is
the first ``count`` sessions to end, in the order they ended. The batch is then leased
atomically in the store (``store/leases.py``): two concurrent exports, on one replica
or several, never take the same session; one that loses a race selects again. Only an
ack takes a batch out of later exports; an unacknowledged lease runs out and its
sessions come back in the same order (creation or end order never changes).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from .branches import branch_of, branch_records, is_tito
from .concat import concat_record
from .interaction import Interaction
from .record import SessionRecord
from .store.base import SessionStore, View
from .store.changes import Watch
from .trees import link_branches, prompt_counts

__all__ = ["Style", "lease_batch", "new_batch_id", "ordered_interactions", "trajectory"]

Style = Literal["individual", "concat"]

_PAGE = 256
"""Sessions read from the store's index per step of a selection."""


def new_batch_id() -> str:
    return "batch-" + uuid.uuid4().hex


@dataclass(slots=True)
class _Selection:
    chosen: list[SessionRecord]
    complete: bool
    lease_ends: list[float] = field(default_factory=list)
    """When the live leases that kept candidates out run out: the selection may change
    then, with no write to wake a waiting export."""


async def lease_batch(
    store: SessionStore,
    *,
    session_ids: list[str] | None = None,
    group_id: str | None = None,
    count: int | None = None,
    timeout_s: float = 0.0,
    deterministic: bool = True,
    lock: asyncio.Lock | None = None,
    visibility_timeout_s: float = 300.0,
    remove: bool = False,
    clock: Callable[[], float] = time.time,
    prepare: Callable[[list[SessionRecord]], Awaitable[None]] | None = None,
) -> tuple[str, list[SessionRecord]]:
    """Lease the sessions to export under a new batch id, waiting up to ``timeout_s``
    for ``count`` of them; returns (batch_id, sessions in delivery order).
    ``prepare`` (building the whole answer) runs under the lock before anything is
    leased: when it raises, nothing is.

    Named ``session_ids`` are taken whatever their ended or exported state (but not
    while another live lease holds them); otherwise only ended sessions not exported
    (of ``group_id``, if given) are candidates. On timeout the result is what is
    ready: in deterministic mode the ended prefix of the batch. A waiting export
    sleeps until the store changes (``store.watch``) or a lease that kept a candidate
    out runs out, never polling.
    """
    batch_id = new_batch_id()
    deadline = time.monotonic() + timeout_s
    async with contextlib.AsyncExitStack() as stack:
        watch: Watch | None = None
        while True:
            async with lock if lock is not None else contextlib.nullcontext():
                now = clock()
                selection = await _select_once(
                    store, session_ids, group_id, count, deterministic, now
                )
                if selection.complete or time.monotonic() >= deadline:
                    if prepare is not None:
                        await prepare(selection.chosen)
                    refused = await store.lease(
                        batch_id, selection.chosen, now=now, until=now + visibility_timeout_s,
                        remove=remove, named=session_ids is not None,
                    )
                    if not refused:
                        return batch_id, selection.chosen
                    continue  # another export (or an ack) got there first: select again
            if watch is None:
                # Watch first, then look again: a change after this look wakes the wait.
                watch = await stack.enter_async_context(store.watch())
                continue
            wait_s = deadline - time.monotonic()
            if selection.lease_ends:
                wait_s = min(wait_s, min(selection.lease_ends) - clock())
            await watch.wait(max(0.0, wait_s))


async def _select_once(
    store: SessionStore,
    session_ids: list[str] | None,
    group_id: str | None,
    count: int | None,
    deterministic: bool,
    now: float,
) -> _Selection:
    if session_ids is not None:
        found = [r for r in [await store.get(s) for s in session_ids] if r is not None]
        held = await store.held_until([r.session_id for r in found], now)
        return _Selection(sorted((r for r in found if r.session_id not in held),
                                 key=lambda r: r.created_seq), True, list(held.values()))
    if group_id is not None:  # one group's sessions: few, read together
        unexported = [r for r in await store.list(group_id) if not r.exported]
        held = await store.held_until([r.session_id for r in unexported], now)
        pending = [r for r in unexported if r.session_id not in held]
        if deterministic:
            chosen = _ended_prefix(pending if count is None else pending[:count])
            return _Selection(chosen, count is None or len(chosen) == count,
                              list(held.values()))
        ended = sorted((r for r in pending if r.ended), key=lambda r: r.ended_seq or 0)
        chosen = ended if count is None else ended[:count]
        return _Selection(chosen, count is None or len(chosen) == count, list(held.values()))
    if deterministic:
        return await _walk(store, "unexported", count, now, stop_at_open=True)
    return await _walk(store, "ready", count, now, stop_at_open=False)


def _ended_prefix(batch: list[SessionRecord]) -> list[SessionRecord]:
    ready: list[SessionRecord] = []
    for record in batch:
        if not record.ended:
            break
        ready.append(record)
    return ready


async def _walk(
    store: SessionStore, view: View, count: int | None, now: float, *, stop_at_open: bool
) -> _Selection:
    """Read ``view`` a page at a time, skipping sessions under a live lease, until
    ``count`` are chosen (or, ``stop_at_open``, an open session ends the ended prefix):
    the cost is what is chosen plus the leased ones passed, not what the store holds."""
    chosen: list[SessionRecord] = []
    lease_ends: list[float] = []
    after = -1
    while True:
        page = await store.scan(view, after=after, limit=_PAGE)
        held = await store.held_until([r.session_id for r in page], now)
        for record in page:
            if record.session_id in held:
                lease_ends.append(held[record.session_id])
                continue
            if stop_at_open and not record.ended:
                return _Selection(chosen, count is None or len(chosen) == count, lease_ends)
            chosen.append(record)
            if count is not None and len(chosen) == count:
                return _Selection(chosen, True, lease_ends)
        if len(page) < _PAGE:
            return _Selection(chosen, count is None, lease_ends)
        last = page[-1]
        after = (last.ended_seq or 0) if view == "ready" else last.created_seq


async def ordered_interactions(
    store: SessionStore, record: SessionRecord
) -> list[Interaction]:
    """The session's interactions in the trajectory's order: by request index; in a
    content-keyed session by (content key, occurrence), which arrival cannot change
    (interactions pinned by ``X-Request-Index`` have no key and come first, by index)."""
    interactions = await store.interactions(record.session_id)
    if record.index_by == "content":
        interactions.sort(key=lambda i: (i.content_key is not None, i.content_key or "",
                                         i.occurrence or 0, i.request_index))
    return interactions


async def trajectory(
    store: SessionStore, record: SessionRecord, style: Style = "individual"
) -> dict[str, Any]:
    """The contract's trajectory object, interactions in ``ordered_interactions``' order.

    ``individual``: one record per interaction under ``interactions``. ``concat``:
    one token sequence (see ``concat.py``); when it cannot be built the
    per-interaction records come along so nothing is lost. Token-in-token-out: one
    training sample per branch, linked (``trees.py``), and ``tito_prompts``, how many
    turns were extended, matched (by matcher) and rendered.
    """
    interactions = await ordered_interactions(store, record)
    head: dict[str, Any] = {
        "session_id": record.session_id,
        "identity": record.identity,
        "group_id": record.group_id,
        "reward": record.reward,
        "metadata": record.metadata,
    }
    if is_tito(interactions):
        head["tito_prompts"] = prompt_counts(interactions)
    if style == "individual":
        shown = [i.to_dict() for i in interactions]
        if is_tito(interactions):
            branch, _ = branch_of(interactions)
            for item in shown:
                item["branch"] = branch.get(item["interaction_id"])
        return {**head, "interactions": shown}
    if is_tito(interactions):
        return {**head, "style": "concat", **_tito_concat(interactions)}
    joined = concat_record(interactions)
    if joined["concat_error"] is not None:
        joined["interactions"] = [i.to_dict() for i in interactions]
    return {**head, "style": "concat", **joined}


def _tito_concat(interactions: list[Any]) -> dict[str, Any]:
    """Token-in-token-out: exact by construction, one sequence per branch (each sampled
    token in exactly one, with loss mask 1), linked; the top-level fields are the main
    conversation's first branch's, as in the drift-checked form."""
    branches = branch_records(interactions)
    chain = link_branches(branches, interactions)
    first = next((b for b in branches if b["branch_id"] == chain[0]), None) if chain else None
    return {
        "token_ids": first["token_ids"] if first else None,
        "loss_mask": first["loss_mask"] if first else None,
        "logprobs": first["logprobs"] if first else None,
        "weight_versions": first["weight_versions"] if first else None,
        "interaction_ids": first["interaction_ids"] if first else [],
        "concat_error": None if first and first["error"] is None else (
            first["error"] if first else {"reason": "no turns"}),
        "branches": branches,
        "chain": chain,
    }
