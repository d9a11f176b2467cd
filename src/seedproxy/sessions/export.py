"""Leasing the batch an export takes (``selection.py`` chooses it) and building each
session's trajectory. The batch is leased atomically in the store (``store/leases.py``):
concurrent exports, on any replicas, never take the same session; one that loses a race
selects again.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

from ..trajectory import ConcatJSON, Style, TrajectoryJSON
from .branches import branch_of, branch_records, is_tito
from .concat import concat_record
from .interaction import Interaction
from .record import SessionRecord
from .selection import Ask, select_once
from .store.base import SessionStore
from .store.changes import Watch
from .trees import link_branches, prompt_counts

__all__ = ["Leased", "Style", "lease_batch", "ordered_interactions", "trajectory"]

class Leased(NamedTuple):
    """What ``lease_batch`` leased under ``batch_id``."""

    batch_id: str
    sessions: list[SessionRecord]
    """To deliver, in delivery order."""
    skipped: list[SessionRecord]
    """Abandoned sessions leased but not delivered (``skip_abandoned``)."""
    waiting: list[SessionRecord]
    """Open sessions the export stopped at (deterministic mode), in creation order."""


async def lease_batch(
    store: SessionStore, *, session_ids: list[str] | None = None, group_id: str | None = None,
    count: int | None = None, timeout_s: float = 0.0, deterministic: bool = True,
    lock: asyncio.Lock | None = None, visibility_timeout_s: float = 300.0,
    remove: bool = False, abandon_after_s: float | None = None, skip_abandoned: bool = False,
    clock: Callable[[], float] = time.time,
    prepare: Callable[[list[SessionRecord]], Awaitable[None]] | None = None,
) -> Leased:
    """Lease the sessions to export under a new batch id, waiting up to ``timeout_s``
    for ``count`` of them (``selection.py``). ``prepare`` (building the whole answer
    from the sessions to deliver) runs under the lock before anything is leased: when
    it raises, nothing is.

    Named ``session_ids`` are taken once each, whatever their ended or exported state
    (but not while another live lease holds them; with ``remove``, a named session
    still open is a ``BadRequest``); otherwise only ended sessions not exported
    (of ``group_id``, if given) are candidates. On timeout the result is what is
    ready: in deterministic mode the ended prefix of the batch. A waiting export
    sleeps until the store changes (``store.watch``), a lease that kept a candidate
    out runs out or a session it waits on comes to its abandon time, never polling.
    ``clock``: wall-clock seconds, for leases and idleness alike.
    """
    ask = Ask(session_ids, group_id, count, deterministic, remove, abandon_after_s,
              skip_abandoned)
    batch_id = "batch-" + uuid.uuid4().hex
    deadline = time.monotonic() + timeout_s
    async with contextlib.AsyncExitStack() as stack:
        watch: Watch | None = None
        while True:
            async with lock if lock is not None else contextlib.nullcontext():
                now = clock()
                selection = await select_once(store, ask, now)
                if selection.complete or time.monotonic() >= deadline:
                    delivered = selection.delivered()
                    if prepare is not None:
                        await prepare(delivered)
                    refused = await store.lease(
                        batch_id, selection.chosen, now=now, until=now + visibility_timeout_s,
                        remove=remove, named=session_ids is not None,
                    )
                    if not refused:
                        return Leased(batch_id, delivered, selection.skipped(),
                                      selection.waiting)
                    continue  # another export (or an ack) got there first: select again
            if watch is None:
                # Watch first, then look again: a change after this look wakes the wait.
                watch = await stack.enter_async_context(store.watch())
                continue
            wait_s = deadline - time.monotonic()
            if selection.wake_at:
                wait_s = min(wait_s, min(selection.wake_at) - clock())
            await watch.wait(max(0.0, wait_s))


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
) -> TrajectoryJSON:
    """The contract's trajectory object, interactions in ``ordered_interactions``' order.

    ``concat``: one token sequence (``concat.py``), and the per-interaction records
    when it cannot be built, so nothing is lost. Token-in-token-out: one training
    sample per branch, linked (``trees.py``), and ``tito_prompts``.
    """
    interactions = await ordered_interactions(store, record)
    head: TrajectoryJSON = {
        "session_id": record.session_id,
        "identity": record.identity,
        "group_id": record.group_id,
        "reward": record.reward,
        "metadata": record.metadata,
        "end_status": record.end_status,
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


def _tito_concat(interactions: list[Any]) -> ConcatJSON:
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
