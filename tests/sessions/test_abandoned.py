"""Issue 34, item 1: one open session must not stall every deterministic export. An
open session the export waits on, idle past ``abandon_after_s``, is ended as abandoned
(atomically: a request arriving meanwhile keeps it open) and exported in its creation
place; ``skip_abandoned`` leases it without delivering it. In every store, with an
injected clock (the stores stamp activity with the wall clock; the export measures
idleness by its own)."""

from __future__ import annotations

import asyncio
import time

import pytest

from seedproxy.sessions import SessionRecord, SessionStore
from seedproxy.sessions.export import lease_batch
from tests.sessions.test_reads import WAIT_S, Watched
from tests.sessions.test_stores import interaction, rec

ABANDON_S = 1800.0


async def touched(store: SessionStore, session_id: str, index: int) -> SessionRecord:
    await store.record(session_id, interaction(f"i{index}", index))
    record = await store.get(session_id)
    assert record is not None
    return record


async def later_than(stamp: float) -> None:
    """Returns once the wall clock has moved past ``stamp`` (a few microseconds)."""
    while time.time() <= stamp:
        await asyncio.sleep(0)


async def fixture(store: SessionStore) -> float:
    """s0 ended, s1 open and idle, s2 ended, s3 open and active, s4 ended (creation
    order, all of group g); returns the idleness cut: s1 was last active at it, s3 after."""
    for n in range(5):
        assert await store.create(rec(f"s{n}", group="g"))
        await touched(store, f"s{n}", 0)
    cut = (await touched(store, "s1", 1)).last_active_at
    await later_than(cut)
    assert (await touched(store, "s3", 1)).last_active_at > cut
    for ended in ("s4", "s2", "s0"):
        await store.end(ended)
    return cut


@pytest.mark.parametrize("group_id", [None, "g"])  # the store's index, or one group's list
async def test_an_idle_session_in_the_middle_is_exported_abandoned_in_creation_order(
    store: SessionStore, group_id: str | None
) -> None:
    cut = await fixture(store)
    clock = lambda: cut + ABANDON_S  # noqa: E731  s1 idle exactly the abandon time
    leased = await lease_batch(store, group_id=group_id, abandon_after_s=ABANDON_S,
                               clock=clock)
    assert [r.session_id for r in leased.sessions] == ["s0", "s1", "s2"]
    assert [r.end_status for r in leased.sessions] == ["ended", "abandoned", "ended"]
    assert [r.session_id for r in leased.waiting] == ["s3"]  # active: the export stops there
    s1, s3 = await store.get("s1"), await store.get("s3")
    assert s1 is not None and s1.ended and s1.end_status == "abandoned"
    assert s3 is not None and not s3.ended and s3.end_status is None
    assert await store.count_open() == 1
    assert await store.ack(leased.batch_id, clock())
    await store.end("s3")
    rest = await lease_batch(store, group_id=group_id, abandon_after_s=ABANDON_S, clock=clock)
    assert [(r.session_id, r.end_status) for r in rest.sessions] == [("s3", "ended"),
                                                                     ("s4", "ended")]
    assert rest.waiting == []


async def test_without_abandon_time_or_before_it_the_export_waits_on_the_open_session(
    store: SessionStore,
) -> None:
    cut = await fixture(store)
    # each look with a later clock than the one before: the earlier batch's lease is over
    for after_s, now in ((ABANDON_S, cut + ABANDON_S - 0.5), (None, cut + 10 * ABANDON_S)):
        leased = await lease_batch(store, abandon_after_s=after_s, clock=lambda n=now: n)
        assert [r.session_id for r in leased.sessions] == ["s0"]
        assert [r.session_id for r in leased.waiting] == ["s1"]
    s1 = await store.get("s1")
    assert s1 is not None and not s1.ended


async def test_skip_abandoned_leases_them_without_delivering_them(store: SessionStore) -> None:
    cut = await fixture(store)
    clock = lambda: cut + ABANDON_S  # noqa: E731
    await store.end("s3")
    leased = await lease_batch(store, count=3, abandon_after_s=ABANDON_S, skip_abandoned=True,
                               clock=clock)
    # s1 is abandoned and skipped: it does not count towards the 3 delivered
    assert [r.session_id for r in leased.sessions] == ["s0", "s2", "s3"]
    assert [r.session_id for r in leased.skipped] == ["s1"]
    assert await store.ack(leased.batch_id, clock())
    s1 = await store.get("s1")
    assert s1 is not None and s1.exported  # taken out with its batch
    rest = await lease_batch(store, abandon_after_s=ABANDON_S, skip_abandoned=True,
                             clock=clock)
    assert [r.session_id for r in rest.sessions] == ["s4"] and rest.skipped == []


async def test_a_request_after_the_look_keeps_the_session_open(store: SessionStore) -> None:
    assert await store.create(rec("s"))
    seen = await touched(store, "s", 0)
    await later_than(seen.last_active_at)
    await touched(store, "s", 1)  # the agent came back after the export's look
    kept = await store.end("s", abandoned_before=seen.last_active_at)
    assert not kept.ended and kept.end_status is None and await store.count_open() == 1
    ended = await store.end("s")
    assert ended.end_status == "ended"
    again = await store.end("s", abandoned_before=time.time() + ABANDON_S)
    assert (again.end_status, again.ended_seq) == ("ended", ended.ended_seq)  # idempotent


async def test_a_waiting_export_wakes_when_the_session_it_waits_on_is_abandoned(
    store: SessionStore,
) -> None:
    """Nothing polls and no write wakes it: the export sleeps until the abandon time."""
    assert await store.create(rec("a"))
    assert await store.create(rec("b"))
    await store.end("b")
    last = (await touched(store, "a", 0)).last_active_at
    start = time.time()
    # the export's clock: "a" idle 0.3 s short of the abandon time at the start
    clock = lambda: last + ABANDON_S - 0.3 + (time.time() - start)  # noqa: E731
    watched = Watched(store)
    leased = await asyncio.wait_for(lease_batch(
        watched, count=2, timeout_s=600.0, abandon_after_s=ABANDON_S,  # type: ignore[arg-type]
        clock=clock), WAIT_S)
    assert watched.opened.is_set()  # it did wait
    assert [(r.session_id, r.end_status) for r in leased.sessions] == [("a", "abandoned"),
                                                                       ("b", "ended")]
