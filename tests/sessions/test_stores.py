"""One suite, three stores: memory, SQLite and a real Redis must behave the same."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import uuid
from array import array
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from seedproxy.errors import SessionNotFound
from seedproxy.sessions import ChoiceRecord, Interaction, SessionRecord, SessionStore, open_store
from seedproxy.sessions.store import RETRY_MEMORY

Opener = Callable[[], SessionStore]


@pytest.fixture(params=["memory", "sqlite", "redis", "redis-sentinel-wait"])
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Opener:
    """Opens a handle on one shared store: the same object for memory, a new connection
    (as a restarted proxy or another replica would open) for SQLite and Redis (also
    through a Sentinel, every write waiting for a replica)."""
    if request.param == "memory":
        shared = open_store("memory://")
        return lambda: shared
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'sessions.db'}"
    elif request.param == "redis":
        url = request.getfixturevalue("redis_url")
    else:
        url = request.getfixturevalue("sentinel_url")
    return lambda: open_store(url)


@pytest.fixture
async def store(opener: Opener) -> AsyncIterator[SessionStore]:
    handle = opener()
    yield handle
    await handle.close()


async def exported(store: SessionStore, ids: list[str]) -> None:
    """Mark sessions exported as an export does: leased by name, then acknowledged."""
    records = [r for r in [await store.get(s) for s in ids] if r is not None]
    batch = f"mark-{uuid.uuid4().hex}"
    assert await store.lease(batch, records, now=0, until=1, remove=False, named=True) == []
    assert await store.ack(batch, 0)


def rec(session_id: str, group: str | None = None, key: str | None = None) -> SessionRecord:
    return SessionRecord(session_id, session_id, key or f"key-{session_id}", group, {"m": 1})


def interaction(iid: str, index: int, tokens: int = 3) -> Interaction:
    return Interaction(
        interaction_id=iid,
        request_index=index,
        seeds=[index * 10, index * 10 + 1],
        endpoint="/v1/chat/completions",
        request={"messages": [{"role": "user", "content": f"q{index}"}]},
        response={"choices": [{"text": "é\u2028"}]},
        prompt_token_ids=array("i", range(tokens)),
        choices=[
            ChoiceRecord(array("i", [7, 8]), array("f", [-0.5, -0.25]), "stop"),
            ChoiceRecord(),
        ],
        latency_ms=1.5,
        upstream="http://u1",
    )


async def test_create_get_find_and_list_in_creation_order(store: SessionStore) -> None:
    assert await store.create(rec("b", group="g"))
    assert await store.create(rec("a"))
    assert await store.create(rec("c", group="g"))
    assert not await store.create(rec("a", key="other"))
    got = await store.get("a")
    assert got is not None and (got.identity, got.api_key, got.metadata) == ("a", "key-a", {"m": 1})
    assert got.next_index == 0 and not got.ended and got.reward is None
    assert await store.get("nope") is None
    owner = await store.find_by_key("key-c")
    assert owner is not None and owner.session_id == "c"
    assert await store.find_by_key("key-nope") is None
    assert [r.session_id for r in await store.list()] == ["b", "a", "c"]
    assert [r.session_id for r in await store.list("g")] == ["b", "c"]
    assert await store.list("none") == []
    seqs = [r.created_seq for r in await store.list()]
    assert seqs == sorted(seqs) and len(set(seqs)) == 3


async def test_allocate_counter_retry_reuse_and_pins(store: SessionStore) -> None:
    await store.create(rec("s"))
    first = await store.allocate("s", digest=b"a", retry=False, pinned=None)
    again = await store.allocate("s", digest=b"a", retry=True, pinned=None)
    fresh = await store.allocate("s", digest=b"a", retry=False, pinned=None)
    pinned = await store.allocate("s", digest=b"b", retry=False, pinned=0)
    pinned_again = await store.allocate("s", digest=b"c", retry=False, pinned=0)
    retry_pin = await store.allocate("s", digest=b"c", retry=True, pinned=0)
    unseen_retry = await store.allocate("s", digest=b"zz", retry=True, pinned=None)
    assert (first.index, first.interaction_id, first.reused) == (0, "i0", False)
    assert (again.index, again.interaction_id, again.reused) == (0, "i0", True)
    assert (fresh.index, fresh.interaction_id) == (1, "i1")
    assert (pinned.index, pinned.interaction_id) == (0, "i0.p0")
    assert (pinned_again.index, pinned_again.interaction_id) == (0, "i0.p1")
    assert (retry_pin.interaction_id, retry_pin.reused) == ("i0.p1", True)
    assert (unseen_retry.index, unseen_retry.reused) == (2, False)
    # the digest "a" now names slot i1 (the latest request with that body)
    assert (await store.allocate("s", digest=b"a", retry=True, pinned=None)).interaction_id == "i1"
    record = await store.get("s")
    assert record is not None and record.next_index == 3


async def test_retry_memory_is_bounded_and_a_retry_refreshes_its_digest(
    store: SessionStore,
) -> None:
    await store.create(rec("s"))
    for n in range(RETRY_MEMORY):
        await store.allocate("s", digest=b"d%d" % n, retry=False, pinned=None)
    # touching d0 by a retry makes it the most recent; d1 is now the oldest
    assert (await store.allocate("s", digest=b"d0", retry=True, pinned=None)).reused
    await store.allocate("s", digest=b"new", retry=False, pinned=None)
    assert (await store.allocate("s", digest=b"d0", retry=True, pinned=None)).index == 0
    forgotten = await store.allocate("s", digest=b"d1", retry=True, pinned=None)
    assert (forgotten.reused, forgotten.index) == (False, RETRY_MEMORY + 1)
    # inserting d1 evicted d2, the oldest; d3 is still remembered
    assert (await store.allocate("s", digest=b"d3", retry=True, pinned=None)).index == 3


async def test_indices_are_unique_and_gap_free_under_asyncio(store: SessionStore) -> None:
    await store.create(rec("s"))

    async def take(n: int) -> int:
        await asyncio.sleep(0.001 * (n % 3))
        return (await store.allocate("s", digest=b"%d" % n, retry=False, pinned=None)).index

    assert sorted(await asyncio.gather(*(take(n) for n in range(48)))) == list(range(48))


async def test_indices_are_unique_and_gap_free_across_threads_and_handles(opener: Opener) -> None:
    """Four threads, each with its own event loop and its own handle on the store
    (for SQLite and Redis: separate connections, as separate replicas would have)."""
    setup = opener()
    await setup.create(rec("s"))
    taken: list[int] = []
    lock = threading.Lock()

    def worker(w: int) -> None:
        async def run() -> None:
            handle = opener()
            try:
                for n in range(16):
                    slot = await handle.allocate(
                        "s", digest=b"%d-%d" % (w, n), retry=False, pinned=None
                    )
                    with lock:
                        taken.append(slot.index)
            finally:
                if handle is not setup:
                    await handle.close()

        asyncio.run(run())

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(taken) == list(range(64))
    record = await setup.get("s")
    assert record is not None and record.next_index == 64
    await setup.close()


async def test_record_replaces_by_id_and_lists_by_index_losslessly(store: SessionStore) -> None:
    await store.create(rec("s"))
    await store.record("s", interaction("i1", 1))
    await store.record("s", interaction("i0.p0", 0))
    await store.record("s", interaction("i0", 0, tokens=1))
    await store.record("s", interaction("i0", 0, tokens=5))  # a retry replaces
    got = await store.interactions("s")
    assert [i.interaction_id for i in got] == ["i0", "i0.p0", "i1"]
    assert got[0].to_storage() == interaction("i0", 0, tokens=5).to_storage()
    assert got[0].choices[0].logprobs.tolist() == [-0.5, -0.25]
    assert got[0].token_count == 5 + 2


async def test_reward_goes_to_the_last_or_the_named_interaction(store: SessionStore) -> None:
    await store.create(rec("s"))
    assert await store.set_reward("s", 0.5, None) is None
    record = await store.get("s")
    assert record is not None and record.reward == 0.5
    for iid, index in [("i0", 0), ("i1", 1), ("i1.p0", 1)]:
        await store.record("s", interaction(iid, index))
    assert await store.set_reward("s", 1.0, None) == "i1.p0"
    assert await store.set_reward("s", -2.0, "i0") == "i0"
    with pytest.raises(SessionNotFound):
        await store.set_reward("s", 3.0, "i9")
    rewards = {i.interaction_id: i.reward for i in await store.interactions("s")}
    assert rewards == {"i0": -2.0, "i1": None, "i1.p0": 1.0}
    record = await store.get("s")
    assert record is not None and record.reward == -2.0


async def test_end_is_idempotent_ordered_and_counted(store: SessionStore) -> None:
    for name in ("a", "b", "c"):
        await store.create(rec(name))
    assert await store.count_open() == 3
    b = await store.end("b")
    a = await store.end("a")
    again = await store.end("b")
    assert b.ended and a.ended and again.ended_seq == b.ended_seq
    assert b.ended_seq is not None and a.ended_seq is not None and b.ended_seq < a.ended_seq
    assert await store.count_open() == 1
    await exported(store, ["a", "unknown"])
    marks = {r.session_id: r.exported for r in await store.list()}
    assert marks == {"a": True, "b": False, "c": False}


async def test_delete_forgets_everything(store: SessionStore) -> None:
    await store.create(rec("s", group="g"))
    await store.allocate("s", digest=b"a", retry=False, pinned=None)
    await store.record("s", interaction("i0", 0))
    assert await store.delete("s")
    assert not await store.delete("s")
    assert await store.get("s") is None and await store.find_by_key("key-s") is None
    assert await store.list() == [] and await store.list("g") == []
    assert await store.count_open() == 0
    # the id may be taken again, from a clean slate
    assert await store.create(rec("s"))
    assert (await store.allocate("s", digest=b"a", retry=True, pinned=None)).index == 0
    assert await store.interactions("s") == []


async def test_unknown_sessions_raise_not_found(store: SessionStore) -> None:
    with pytest.raises(SessionNotFound):
        await store.allocate("nope", digest=b"", retry=False, pinned=None)
    with pytest.raises(SessionNotFound):
        await store.record("nope", interaction("i0", 0))
    with pytest.raises(SessionNotFound):
        await store.interactions("nope")
    with pytest.raises(SessionNotFound):
        await store.set_reward("nope", 1.0, None)
    with pytest.raises(SessionNotFound):
        await store.end("nope")


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
async def test_a_reopened_store_keeps_counters_and_interactions(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A restart (a fresh handle on the same file or database) goes on where it stopped."""
    if kind == "sqlite":
        url = f"sqlite:///{tmp_path / 'sessions.db'}"
    else:
        url = request.getfixturevalue("redis_url")
    before = open_store(url)
    await before.create(rec("a"))
    for n in range(3):
        await before.allocate("a", digest=b"%d" % n, retry=False, pinned=None)
    await before.record("a", interaction("i2", 2))
    first_end = await before.end("a")
    await before.close()

    after = open_store(url)
    assert await after.create(rec("b"))
    assert [r.session_id for r in await after.list()] == ["a", "b"]
    slot = await after.allocate("a", digest=b"3", retry=False, pinned=None)
    retried = await after.allocate("a", digest=b"1", retry=True, pinned=None)
    assert (slot.index, retried.index, retried.reused) == (3, 1, True)
    assert [i.interaction_id for i in await after.interactions("a")] == ["i2"]
    second_end = await after.end("b")
    assert first_end.ended_seq is not None and second_end.ended_seq is not None
    assert second_end.ended_seq > first_end.ended_seq
    await after.close()


def test_unknown_store_scheme_is_a_config_error() -> None:
    from seedproxy.errors import ConfigError

    with pytest.raises(ConfigError, match="unsupported store URL"):
        open_store("mongodb://x")
    with pytest.raises(ConfigError, match="unknown redis store option"):
        open_store("redis://127.0.0.1:1/0?bogus=1")


async def test_the_open_count_follows_create_end_and_delete_in_every_handle(
    store: SessionStore, opener: Opener
) -> None:
    """``count_open`` is kept as sessions change (not counted per call): it must stay
    right through ends, repeated ends, deletes of open and ended sessions, and be
    the same from another handle on the same store."""
    for name in ("a", "b", "c", "d"):
        assert await store.create(rec(name))
    assert not await store.create(rec("a"))  # taken: no change
    await store.end("a")
    await store.end("a")
    assert await store.delete("a")  # ended: was not counted
    assert await store.delete("b")  # open
    assert not await store.delete("b")
    assert await store.count_open() == 2
    other = opener()
    try:
        await other.create(rec("e"))
        await other.end("c")
        assert await other.count_open() == await store.count_open() == 2
    finally:
        if other is not store:
            await other.close()
    interaction_ = interaction("i0", 0)
    interaction_.abandoned = True
    await store.record("d", interaction_)
    assert [i.abandoned for i in await store.interactions("d")] == [True]
    assert (await store.interactions("d"))[0].to_dict()["abandoned"] is True


async def test_an_sqlite_file_from_before_the_open_count_gets_it_counted(tmp_path: Path) -> None:
    import sqlite3

    url = f"sqlite:///{tmp_path / 'old.db'}"
    store = open_store(url)
    for name in ("a", "b", "c"):
        await store.create(rec(name))
    await store.end("a")
    await store.close()
    with sqlite3.connect(tmp_path / "old.db") as db:  # as a file written before the counter
        db.execute("DELETE FROM counters WHERE name = 'open'")
    reopened = open_store(url)
    try:
        assert await reopened.count_open() == 2
        await reopened.create(rec("d"))
        assert await reopened.count_open() == 3
    finally:
        await reopened.close()


async def test_a_retried_interaction_starts_without_the_old_reward(store: SessionStore) -> None:
    await store.create(rec("s"))
    await store.record("s", interaction("i0", 0))
    await store.record("s", interaction("i1", 1))
    assert await store.set_reward("s", 0.5, "i0") == "i0"
    await store.record("s", interaction("i0", 0, tokens=9))  # the SDK retried i0
    got = {
        i.interaction_id: (i.reward, len(i.prompt_token_ids)) for i in await store.interactions("s")
    }
    assert got == {"i0": (None, 9), "i1": (None, 3)}


async def test_sqlite_reads_do_not_wait_for_another_writer(tmp_path: Path) -> None:
    """A read takes no write lock: it answers while another process holds one."""
    path = tmp_path / "sessions.db"
    store = open_store(f"sqlite:///{path}")
    await store.create(rec("s"))
    await store.record("s", interaction("i0", 0))
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another replica mid-write
    try:
        got = await store.get("s")
        assert got is not None and got.session_id == "s"
        assert [r.session_id for r in await store.list()] == ["s"]
        assert (await store.find_by_key("key-s")) is not None
        assert [i.interaction_id for i in await store.interactions("s")] == ["i0"]
        assert await store.count_open() == 1
    finally:
        other.execute("ROLLBACK")
        other.close()
        await store.close()


async def test_redis_rewards_are_one_script_each(redis_url: str) -> None:
    """Each read-modify-write reaches Redis as one EVALSHA: nothing can land between
    its read and its write (another replica's retry, a delete)."""
    import redis.asyncio as aioredis

    store = open_store(redis_url)
    await store.create(rec("s"))
    await store.record("s", interaction("i0", 0))
    await store.set_reward("s", 0.0, None)  # loads the scripts
    probe = aioredis.Redis.from_url(redis_url.split("?")[0])

    async def commands_of(action: Callable[[], Awaitable[object]]) -> list[str]:
        """The commands clients sent during ``action`` (not those its scripts ran)."""
        async with probe.monitor() as monitor:
            await action()
            await probe.echo("end-of-action")
            sent = []
            while True:
                seen = await monitor.next_command()
                if seen["command"] == "ECHO end-of-action":
                    return sent
                name = seen["command"].split()[0]
                if seen.get("client_type") != "lua" and name not in ("HELLO", "CLIENT"):
                    sent.append(name)  # (HELLO, CLIENT: a new connection's handshake)

    try:
        assert await commands_of(lambda: store.set_reward("s", 1.0, None)) == ["EVALSHA"]
        assert await commands_of(lambda: store.set_reward("s", 2.0, "i0")) == ["EVALSHA"]
        rewards = [i.reward for i in await store.interactions("s")]
        assert rewards == [2.0]
        record = await store.get("s")
        assert record is not None and record.reward == 2.0
    finally:
        await probe.aclose()
        await store.close()


async def seat(store: SessionStore, session_id: str, digest: bytes, key: str | None, *,
               retry: bool = False) -> tuple[str, int | None]:
    slot = await store.allocate(session_id, digest=digest, retry=retry, pinned=None,
                                content_key=key)
    return slot.interaction_id, slot.occurrence


async def test_occurrences_count_per_key_and_come_back_for_the_same_interaction(
    store: SessionStore,
) -> None:
    await store.create(rec("s"))
    assert [await seat(store, "s", b"d%d" % n, "k1") for n in range(3)] == [
        ("i0", 0), ("i1", 1), ("i2", 2)]
    assert await seat(store, "s", b"d3", "k2") == ("i3", 0)
    assert await seat(store, "s", b"d1", "k1", retry=True) == ("i1", 1)  # its number back
    assert await seat(store, "s", b"d4", "k1") == ("i4", 3)
    assert await seat(store, "s", b"d5", None) == ("i5", None)  # arrival mode: no number
    await store.create(rec("t"))
    assert await seat(store, "t", b"d0", "k1") == ("i0", 0)  # per session
    with pytest.raises(SessionNotFound):
        await seat(store, "nope", b"d0", "k1")
    assert await store.delete("s")
    await store.create(rec("s"))
    assert await seat(store, "s", b"d0", "k1") == ("i0", 0)  # forgotten with the session


async def test_occurrence_numbers_any_key_apart_from_allocate(
    store: SessionStore,
) -> None:
    await store.create(rec("s"))
    assert [await store.occurrence("s", "k1", f"i{n}") for n in range(3)] == [0, 1, 2]
    assert await store.occurrence("s", "k2", "i3") == 0
    assert await store.occurrence("s", "k1", "i1") == 1  # a retry gets its number back
    assert await store.occurrence("s", "k1", "i4") == 3
    await store.create(rec("t"))
    assert await store.occurrence("t", "k1", "i0") == 0  # per session
    with pytest.raises(SessionNotFound):
        await store.occurrence("nope", "k1", "i0")
    assert await store.delete("s")
    await store.create(rec("s"))
    assert await store.occurrence("s", "k1", "i0") == 0  # forgotten with the session


async def test_concurrent_occurrences_of_one_key_are_distinct(opener: Opener) -> None:
    handles = [opener() for _ in range(4)]
    await handles[0].create(rec("s"))
    seats = await asyncio.gather(*(
        seat(handles[n % 4], "s", b"d%d" % n, "k") for n in range(40)
    ))
    assert sorted(number for _, number in seats) == list(range(40))
    assert len({interaction for interaction, _ in seats}) == 40
    for handle in {id(h): h for h in handles}.values():
        await handle.close()


async def test_the_index_mode_is_kept_with_the_session(opener: Opener) -> None:
    handle = opener()
    keyed = rec("k")
    keyed.index_by = "content"
    await handle.create(keyed)
    await handle.create(rec("a"))
    again = opener()
    got, plain = await again.get("k"), await again.get("a")
    assert got is not None and got.index_by == "content"
    assert plain is not None and plain.index_by == "arrival"
    for h in {id(handle): handle, id(again): again}.values():
        await h.close()


async def test_records_carry_the_store_epoch_kept_by_every_handle(opener: Opener) -> None:
    """One epoch per store, the same on every handle (a restarted proxy, a replica)."""
    first = opener()
    a, b = rec("a"), rec("b")
    await first.create(a)
    again = opener()
    await again.create(b)
    assert a.store_epoch is not None and len(a.store_epoch) == 16
    assert b.store_epoch == a.store_epoch
    got = await again.get("a")
    assert got is not None and got.store_epoch == a.store_epoch
    listed = await first.list()
    assert [r.store_epoch for r in listed] == [a.store_epoch] * 2
    for handle in {id(first): first, id(again): again}.values():
        await handle.close()


async def test_a_new_store_has_a_new_epoch_and_the_same_indices(tmp_path: Path) -> None:
    """A new SQLite file (or memory store) starts indices again at 0 under a new epoch."""
    epochs, indices = [], []
    for url in (f"sqlite:///{tmp_path / 'one.db'}", f"sqlite:///{tmp_path / 'two.db'}",
                "memory://", "memory://"):
        store = open_store(url)
        record = rec("s")
        await store.create(record)
        slot = await store.allocate("s", digest=b"d", retry=False, pinned=None)
        epochs.append(record.store_epoch)
        indices.append(slot.index)
        await store.close()
    assert indices == [0, 0, 0, 0]
    assert len(set(epochs)) == 4
