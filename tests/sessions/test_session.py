import asyncio
from concurrent.futures import ThreadPoolExecutor

import pytest

from seedproxy.errors import BadRequest, SessionNotFound
from seedproxy.sessions import MemoryStore, Session, SessionManager, SessionRecord, Slot


def _session() -> Session:
    return Session(SessionRecord("s", "s", "key"))


def _index(session: Session) -> int:
    slot = session.allocate(digest=b"d", retry=False, pinned=None)
    assert isinstance(slot, Slot)
    return slot.index


@pytest.mark.parametrize(("workers", "each"), [(8, 4), (8, 32)])
def test_indices_are_unique_and_gap_free_under_threads(workers: int, each: int) -> None:
    session = _session()
    with ThreadPoolExecutor(workers) as pool:
        batches = list(
            pool.map(lambda _: [_index(session) for _ in range(each)], range(workers))
        )
    taken = sorted(i for batch in batches for i in batch)
    assert taken == list(range(workers * each))


async def test_indices_are_unique_and_gap_free_under_asyncio() -> None:
    store = MemoryStore()
    await store.create(SessionRecord("s", "s", "key"))

    async def take(n: int) -> int:
        await asyncio.sleep(0.001 * (n % 3))
        return (await store.allocate("s", digest=bytes([n]), retry=False, pinned=None)).index

    assert sorted(await asyncio.gather(*(take(n) for n in range(32)))) == list(range(32))


async def test_retry_with_the_same_digest_reuses_the_slot_and_a_pin_leaves_the_counter() -> None:
    store = MemoryStore()
    await store.create(SessionRecord("s", "s", "key"))
    first = await store.allocate("s", digest=b"a", retry=False, pinned=None)
    again = await store.allocate("s", digest=b"a", retry=True, pinned=None)
    fresh = await store.allocate("s", digest=b"a", retry=False, pinned=None)
    pinned = await store.allocate("s", digest=b"b", retry=False, pinned=0)
    pinned_again = await store.allocate("s", digest=b"c", retry=False, pinned=0)
    after = await store.allocate("s", digest=b"d", retry=False, pinned=None)
    assert (first.index, first.interaction_id) == (0, "i0")
    assert (again.index, again.interaction_id, again.reused) == (0, "i0", True)
    assert fresh.index == 1
    assert (pinned.index, pinned.interaction_id) == (0, "i0.p0")
    assert pinned_again.interaction_id == "i0.p1"
    assert after.index == 2


async def test_repeated_identity_gets_a_suffixed_session_and_groups_get_member_identities() -> None:
    manager = SessionManager(MemoryStore())
    first = await manager.create_group(identity="17", group_size=2)
    second = await manager.create_group(identity="17", group_size=2)
    assert [(r.session_id, r.identity) for r in first.sessions] == [
        ("17:0", "17:0"),
        ("17:1", "17:1"),
    ]
    assert [(r.session_id, r.identity) for r in second.sessions] == [
        ("17:0-1", "17:0"),
        ("17:1-1", "17:1"),
    ]
    assert (first.group_id, second.group_id) == ("17", "17-1")


async def test_a_shared_seed_for_a_group_is_refused() -> None:
    manager = SessionManager(MemoryStore())
    with pytest.raises(BadRequest, match="shared seed"):
        await manager.create_group(identity="17", group_size=4, seed=1)
    assert await manager.store.list() == []


async def test_unknown_session_raises_not_found() -> None:
    store = MemoryStore()
    with pytest.raises(SessionNotFound):
        await store.allocate("nope", digest=b"", retry=False, pinned=None)
