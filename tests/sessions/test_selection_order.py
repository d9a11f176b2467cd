"""Exports and listings pinned on one fixture (groups; open, ended, exported and
leased sessions), in every store: the indexes give exactly the sessions, and the
order, that reading every session gave."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest

from seedproxy.proxy.admin import session_page
from seedproxy.sessions import SessionRecord, SessionStore
from seedproxy.sessions import selection as selection_module
from seedproxy.sessions.export import lease_batch
from tests.sessions.test_stores import interaction

HELD_UNTIL = 10.0**12
"""The lease on ``d`` outlives every clock below."""

CREATED = [("a0", "A", "g1"), ("a1", "A", "g1"), ("b", "b", None), ("c0", "C", "g2"),
           ("a2", "A", "g1"), ("c1", "C", "g2"), ("d", "d", None), ("e", "e", None)]
ENDED = ["c0", "a1", "b", "a0", "d", "e"]  # a2 and c1 stay open


async def fixture(store: SessionStore) -> None:
    for session_id, identity, group in CREATED:
        assert await store.create(
            SessionRecord(session_id, identity, f"key-{session_id}", group, {"n": session_id}))
        await store.record(session_id, interaction("i0", 0))
    last = interaction("i1", 1)
    last.upstream, last.choices[0].weight_version = "http://u2", "v7"
    await store.record("a0", last)
    await store.record("a0", interaction("i0.p0", 0))  # pinned to an earlier index
    await store.record("a0", interaction("i0", 0))  # a retry replaces it: not one more
    for session_id in ENDED:
        await store.end(session_id)
    records = {r.session_id: r for r in await store.list()}
    assert await store.lease("exp", [records["b"]], now=1.0, until=2.0, remove=False,
                             named=False) == []
    assert await store.ack("exp", 1.5)  # b: exported
    assert await store.lease("live", [records["d"]], now=1.0, until=HELD_UNTIL,
                             remove=False, named=False) == []  # d: leased, never acked


def ticking() -> Callable[[], float]:
    """A clock that moves an hour per export: each export's own lease has run out by
    the next one (only ``d``'s stays live)."""
    counter = itertools.count(1)
    return lambda: 1000.0 + 3600.0 * next(counter)


@pytest.mark.parametrize("page", [1, 2, 256])
async def test_exports_choose_the_same_sessions_in_the_same_order(
    store: SessionStore, page: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(selection_module, "PAGE", page)  # index read in steps
    await fixture(store)
    clock = ticking()

    async def chosen(**kwargs: object) -> list[str]:
        leased = await lease_batch(store, clock=clock, visibility_timeout_s=1.0,
                                   **kwargs)  # type: ignore[arg-type]
        return [r.session_id for r in leased.sessions]

    # Deterministic: creation order, the ended prefix (a2 is open), b exported, d leased.
    assert await chosen() == ["a0", "a1", "c0"]
    assert await chosen(count=2) == ["a0", "a1"]
    assert await chosen(count=3) == ["a0", "a1", "c0"]
    assert await chosen(count=4) == ["a0", "a1", "c0"]  # not complete: what is ready
    assert await chosen(group_id="g1") == ["a0", "a1"]
    assert await chosen(group_id="g2", count=1) == ["c0"]
    # Not deterministic: the order they ended.
    assert await chosen(deterministic=False) == ["c0", "a1", "a0", "e"]
    assert await chosen(deterministic=False, count=3) == ["c0", "a1", "a0"]
    assert await chosen(deterministic=False, group_id="g1") == ["a1", "a0"]
    # Named: whatever their state, but not under another live lease.
    assert await chosen(session_ids=["e", "b", "a2", "d", "nope"]) == ["b", "a2", "e"]


async def test_pages_list_the_same_sessions_with_the_same_summaries(store: SessionStore) -> None:
    await fixture(store)

    async def listed(**kwargs: object) -> tuple[list[tuple[str, str, int]], object, object]:
        args: dict[str, object] = {"group_id": None, "identity": None, "offset": 0,
                                   "limit": 100, **kwargs}
        page = await session_page(store, **args)  # type: ignore[arg-type]
        rows = [(s["session_id"], s["state"], s["interactions"]) for s in page["sessions"]]
        return rows, page["total"], page["next_offset"]

    every = [("a0", "ended", 3), ("a1", "ended", 1), ("b", "exported", 1), ("c0", "ended", 1),
             ("a2", "open", 1), ("c1", "open", 1), ("d", "ended", 1), ("e", "ended", 1)]
    assert await listed() == (every, 8, None)
    for offset in range(9):
        end = offset + 3
        assert await listed(offset=offset, limit=3) == (
            every[offset:end], 8, end if end < 8 else None)
    assert await listed(group_id="g1") == ([every[0], every[1], every[4]], 3, None)
    assert await listed(group_id="g2", limit=1) == ([every[3]], 2, 1)
    assert await listed(identity="A", offset=1) == ([every[1], every[4]], 3, None)
    assert await listed(identity="A", group_id="g2") == ([], 0, None)
    assert await listed(identity="C", group_id="g2", limit=1) == ([every[3]], 2, 1)
    assert await listed(group_id="none") == ([], 0, None)
    page = await session_page(store, group_id=None, identity=None, offset=0, limit=1)
    first = page["sessions"][0]
    assert first == {"session_id": "a0", "identity": "A", "group_id": "g1", "interactions": 3,
                     "state": "ended", "reward": None, "upstream": "http://u2",
                     "metadata": {"n": "a0"}, "weight_version": ["v7", None]}
