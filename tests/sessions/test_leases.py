"""Export leases, one suite for memory, SQLite and a real Redis, on a clock the test
passes in (``now``): no waiting for a lease to run out."""

from __future__ import annotations

import asyncio

from seedproxy.sessions import SessionStore
from seedproxy.sessions.store.leases import BATCH_KEEP_S
from tests.sessions import test_stores
from tests.sessions.test_stores import Opener, rec

# the store suite's fixtures: every lease test runs on memory, SQLite and Redis
opener = test_stores.opener
store = test_stores.store


async def held(store: SessionStore, ids: list[str], now: float) -> set[str]:
    return set(await store.held_until(ids, now))


async def made(store: SessionStore, *ids: str) -> list:  # type: ignore[type-arg]
    for session_id in ids:
        assert await store.create(rec(session_id))
    by_id = {r.session_id: r for r in await store.list()}
    return [by_id[s] for s in ids]


async def test_a_lease_holds_until_its_time_then_the_sessions_are_free(store: SessionStore) -> None:
    a, b, c = await made(store, "a", "b", "c")
    assert await store.lease("b1", [a, b], now=100, until=110, remove=False, named=False) == []
    assert await held(store, ["a", "b", "c"], 105) == {"a", "b"}
    # all or none: c is free, b is not
    assert await store.lease("b2", [b, c], now=105, until=120, remove=False, named=False) == ["b"]
    assert await held(store, ["c"], 105) == set()
    assert await held(store, ["a", "b"], 110) == set()  # ran out
    assert await store.lease("b3", [b, c], now=110, until=120, remove=False, named=True) == []
    assert await held(store, ["a", "b", "c"], 111) == {"b", "c"}
    assert await held(store, [], 111) == set()


async def test_ack_marks_exported_releases_the_lease_and_is_idempotent(store: SessionStore) -> None:
    a, b = await made(store, "a", "b")
    assert not await store.ack("nope", 100)
    assert await store.lease("b1", [a, b], now=100, until=110, remove=False, named=False) == []
    assert await store.ack("b1", 101)
    assert await held(store, ["a", "b"], 102) == set()
    assert {r.session_id: r.exported for r in await store.list()} == {"a": True, "b": True}
    assert await store.ack("b1", 102)  # again: the same answer, nothing changes
    # an exported session is no candidate for a queue lease, but may be named
    assert await store.lease("b2", [a], now=103, until=110, remove=False, named=False) == ["a"]
    assert await store.lease("b3", [a], now=103, until=110, remove=False, named=True) == []
    assert await store.lease("b4", [], now=103, until=110, remove=False, named=False) == []
    assert await store.ack("b4", 104)  # an empty batch is a batch too


async def test_a_late_ack_still_counts_and_a_forgotten_batch_is_unknown(
    store: SessionStore,
) -> None:
    (a,) = await made(store, "a")
    assert await store.lease("b1", [a], now=100, until=110, remove=False, named=False) == []
    assert await store.lease("b2", [a], now=200, until=210, remove=False, named=False) == []
    assert await store.ack("b1", 201)  # delivered before; its redelivery is still leased
    record = await store.get("a")
    assert record is not None and record.exported
    assert await held(store, ["a"], 202) == {"a"}  # b2's lease is b2's to release
    assert await store.ack("b2", 203) and await held(store, ["a"], 204) == set()
    assert not await store.ack("b1", 201 + BATCH_KEEP_S + 1)


async def test_remove_deletes_on_ack_and_never_a_newer_session_under_the_id(
    store: SessionStore,
) -> None:
    a, b = await made(store, "a", "b")
    assert await store.lease("b1", [a, b], now=100, until=110, remove=True, named=False) == []
    assert await store.get("a") is not None  # nothing is deleted before the ack
    assert await store.delete("a")
    assert await store.create(rec("a", key="key-a2"))  # a new session reuses the id
    assert await held(store, ["a"], 101) == set()  # the old lease went with the old session
    assert await store.ack("b1", 101)
    newer = await store.get("a")
    assert newer is not None and not newer.exported
    assert await store.get("b") is None
    assert await store.ack("b1", 102)
    # a lease taken on the old session is refused for the newer one
    assert await store.lease("b2", [a], now=102, until=110, remove=False, named=True) == ["a"]


async def test_one_session_leased_at_once_from_many_handles_has_one_winner(
    opener: Opener,
) -> None:
    handles = [opener() for _ in range(6)]
    try:
        (a,) = await made(handles[0], "a")

        async def take(i: int) -> list[str]:
            return await handles[i].lease(f"b{i}", [a], now=100, until=110, remove=False,
                                          named=False)

        outcomes = await asyncio.gather(*(take(i) for i in range(len(handles))))
        assert sorted(len(o) for o in outcomes) == [0] + [1] * (len(handles) - 1)
    finally:
        for handle in {id(h): h for h in handles}.values():
            await handle.close()
