"""Reads that do not scan the store, in every store: views paged from indexes, the
activity index, the change counter and the watch that wakes a waiting export.

Cost is checked as work, never as time: a wrapper counts the session records a read
returns from the store, and it must not grow with the sessions stored."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from seedproxy.proxy.admin import session_page
from seedproxy.sessions import SessionRecord, SessionStore, open_store
from seedproxy.sessions.eviction import Evictor
from seedproxy.sessions.export import lease_batch
from seedproxy.sessions.store.changes import Watch
from seedproxy.sessions.store.sqlite import SqliteStore
from seedproxy.sessions.store.sqlite_core import IDLE_QUERY, PAGE_QUERIES, REWARD_QUERIES
from tests.sessions.test_stores import Opener, exported, interaction, rec

WAIT_S = 30.0
"""A stuck wake-up fails the test here; nothing is timed."""


class Counting:
    """Forwards to ``inner``, counting the session records its reads return."""

    def __init__(self, inner: SessionStore) -> None:
        self.inner = inner
        self.records = 0

    def __getattr__(self, name: str) -> Any:
        found = getattr(self.inner, name)
        if name not in ("get", "list", "scan", "idle", "find_by_key"):
            return found

        async def counted(*args: Any, **kwargs: Any) -> Any:
            result = await found(*args, **kwargs)
            self.records += len(result) if isinstance(result, list) else int(result is not None)
            return result

        return counted


async def filled(store: SessionStore, n: int) -> None:
    """``n`` exported sessions, then an open one and an exported idle-proof one."""
    for k in range(n):
        assert await store.create(rec(f"s{k}", group=f"g{k % 3}"))
        await store.end(f"s{k}")
    await exported(store, [f"s{k}" for k in range(n)])
    assert await store.create(rec("open"))


async def records_read(store: SessionStore, action: Callable[[Counting], Awaitable[object]]) -> int:
    counting = Counting(store)
    await action(counting)
    return counting.records


@pytest.mark.parametrize("kind", ["page", "export", "export-any-order", "export-abandoning",
                                  "sweep"])
async def test_reads_cost_the_same_whatever_the_store_holds(opener: Opener, kind: str) -> None:
    actions: dict[str, Callable[[Counting], Awaitable[object]]] = {
        "page": lambda s: session_page(s, group_id=None, identity=None, offset=0,  # type: ignore[arg-type]
                                       limit=10),
        "export": lambda s: lease_batch(s),  # type: ignore[arg-type]
        "export-any-order": lambda s: lease_batch(s, deterministic=False),  # type: ignore[arg-type]
        # "open" is idle past the abandon time: ended as abandoned, and exported
        "export-abandoning": lambda s: lease_batch(  # type: ignore[arg-type]
            s, abandon_after_s=1.0, clock=lambda: time.time() + 10.0),
        "sweep": lambda s: Evictor(s, 3600.0).sweep(),  # type: ignore[arg-type]
    }
    seen = []
    for n in (30, 300):
        handle = opener()
        if n == 300:
            for k in range(30):  # the first fill is gone: the store holds 300
                await handle.delete(f"s{k}")
            await handle.delete("open")
        await filled(handle, n)
        seen.append(await records_read(handle, actions[kind]))
        if n == 30:
            assert seen[0] <= 11  # a page of 10 (+1 to know there is more), or less
    assert seen[0] == seen[1], seen


async def test_views_page_from_a_cursor_and_count(store: SessionStore) -> None:
    for k in range(7):
        assert await store.create(rec(f"s{k}", group="odd" if k % 2 else "even"))
    for k in (4, 1, 6):
        await store.end(f"s{k}")
    await exported(store, ["s6"])

    async def ids(view: Any, **kw: Any) -> list[str]:
        return [r.session_id for r in await store.scan(view, **kw)]

    all_ = await store.scan("all", limit=100)
    seq = {r.session_id: r.created_seq for r in all_}
    assert [r.session_id for r in all_] == [f"s{k}" for k in range(7)]
    assert await ids("all", after=seq["s2"], limit=2) == ["s3", "s4"]
    assert await ids("all", after=seq["s2"], offset=1, limit=2) == ["s4", "s5"]
    assert await ids("group", key="odd", limit=100) == ["s1", "s3", "s5"]
    assert await ids("group", key="odd", after=seq["s1"], limit=1) == ["s3"]
    assert await ids("identity", key="s3", limit=100) == ["s3"]
    assert await ids("unexported", limit=100) == ["s0", "s1", "s2", "s3", "s4", "s5"]
    assert await ids("ready", limit=100) == ["s4", "s1"]  # s6 exported; order they ended
    ready = await store.scan("ready", limit=1)
    assert await ids("ready", after=ready[0].ended_seq or 0, limit=5) == ["s1"]
    assert [await store.count("all"), await store.count("group", key="even"),
            await store.count("identity", key="s0"), await store.count("group", key="x")] == [
                7, 4, 1, 0]
    await store.delete("s3")
    assert await ids("group", key="odd", limit=100) == ["s1", "s5"]
    assert await store.count("all") == 6 and await store.count("identity", key="s3") == 0


async def test_the_summary_on_the_record_follows_every_recorded_interaction(
    store: SessionStore,
) -> None:
    assert await store.create(rec("s"))
    got = await store.get("s")
    assert got is not None and got.interaction_count == 0 and got.last_upstream is None
    late = interaction("i2", 2)
    late.upstream = "http://late"
    await store.record("s", late)
    await store.record("s", interaction("i0", 0))  # earlier index: the last stays i2
    await store.record("s", interaction("i0", 0))  # a replacement: no more interactions
    got = await store.get("s")
    assert got is not None and (got.interaction_count, got.last_upstream) == (2, "http://late")
    later = interaction("i3", 3)
    later.choices = later.choices[:1]
    later.choices[0].weight_version = "w9"
    await store.record("s", later)
    got = await store.get("s")
    assert got is not None
    assert (got.interaction_count, got.last_upstream, got.last_weight_version) == (
        3, "http://u1", "w9")


async def test_idle_reads_the_least_recently_active_first(store: SessionStore) -> None:
    for name in ("a", "b", "c"):
        assert await store.create(rec(name))
    await store.allocate("a", digest=b"x", retry=False, pinned=None)  # a: active again
    records = {r.session_id: r for r in await store.list()}
    cutoff = max(r.last_active_at for r in records.values())
    assert [r.session_id for r in await store.idle(cutoff, 10)] == ["b", "c", "a"]
    assert [r.session_id for r in await store.idle(cutoff, 2)] == ["b", "c"]
    assert await store.idle(min(r.last_active_at for r in records.values()) - 1, 10) == []
    await store.delete("b")
    assert [r.session_id for r in await store.idle(cutoff, 10)] == ["c", "a"]


async def test_the_version_moves_on_every_change_a_listing_shows(store: SessionStore) -> None:
    versions = [await store.version()]

    async def moved(action: Awaitable[object]) -> None:
        await action
        versions.append(await store.version())
        assert versions[-1] != versions[-2]

    await moved(store.create(rec("s")))
    await moved(store.record("s", interaction("i0", 0)))
    await moved(store.set_reward("s", 1.0, None))
    await moved(store.end("s"))
    await moved(exported(store, ["s"]))
    await moved(store.delete("s"))
    before = await store.version()
    assert await store.get("s") is None and await store.scan("all", limit=5) == []
    assert await store.version() == before  # reads change nothing


async def test_a_watch_wakes_when_another_handle_ends_a_session(
    opener: Opener, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Memory: one store; SQLite: the same handle (its own signal); Redis: a second
    connection, as another replica, with the version backstop an hour away."""
    param = request.node.callspec.params["opener"]
    if param.startswith("redis"):
        fixture = "redis_url" if param == "redis" else "sentinel_url"
        url = request.getfixturevalue(fixture) + "&watch_check_s=3600"
        waiter, ender = open_store(url), open_store(url)
    elif param == "sqlite":
        waiter = ender = SqliteStore(str(tmp_path / "w.db"), check_s=None)
    else:
        waiter = ender = opener()
    assert await ender.create(rec("s"))
    async with waiter.watch() as watch:
        ended = asyncio.create_task(ender.end("s"))
        await asyncio.wait_for(watch.wait(3600.0), WAIT_S)
        await ended
    for handle in {id(waiter): waiter, id(ender): ender}.values():
        await handle.close()


async def test_a_sqlite_watch_sees_another_process_through_the_version(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.db")
    mine, theirs = SqliteStore(path, check_s=0.05), SqliteStore(path)
    assert await theirs.create(rec("s"))
    async with mine.watch() as watch:
        await theirs.end("s")  # no signal reaches this handle: only the file changed
        await asyncio.wait_for(watch.wait(3600.0), WAIT_S)
    await mine.close()
    await theirs.close()


class Watched:
    """Forwards to ``inner``; ``opened`` is set once a watch is open (the waiter is
    registered: a change from then on must wake it)."""

    def __init__(self, inner: SessionStore) -> None:
        self.inner = inner
        self.opened = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    @contextlib.asynccontextmanager
    async def watch(self) -> AsyncIterator[Watch]:
        async with self.inner.watch() as watch:
            self.opened.set()
            yield watch


@pytest.mark.parametrize("any_order", [False, True])
async def test_a_waiting_export_returns_when_a_session_ends(
    store: SessionStore, any_order: bool
) -> None:
    """Nothing polls: the export sleeps until the store's change wakes it (a 600 s
    timeout it would otherwise sit out)."""
    assert await store.create(rec("s"))
    watched = Watched(store)
    exporting = asyncio.create_task(lease_batch(
        watched, count=1, timeout_s=600.0, deterministic=not any_order))  # type: ignore[arg-type]
    await asyncio.wait_for(watched.opened.wait(), WAIT_S)
    await store.end("s")
    leased = await asyncio.wait_for(exporting, WAIT_S)
    assert [r.session_id for r in leased.sessions] == ["s"]


def test_each_sqlite_read_uses_an_index(tmp_path: Path) -> None:
    path = tmp_path / "plan.db"
    SqliteStore(str(path))  # creates the schema
    db = sqlite3.connect(path)
    queries = {**PAGE_QUERIES, "idle": IDLE_QUERY}
    for name, sql in queries.items():
        args = [None] * sql.count("?")
        plan = " | ".join(row[3] for row in db.execute("EXPLAIN QUERY PLAN " + sql, args))
        assert "USING" in plan and "INDEX" in plan, (name, plan)
        assert "TEMP B-TREE" not in plan, (name, plan)  # no sort of what was read
    db.close()


def test_a_named_reward_finds_its_interaction_by_key_not_by_reading_the_history(
    tmp_path: Path,
) -> None:
    path = tmp_path / "plan.db"
    SqliteStore(str(path))
    db = sqlite3.connect(path)
    sql = REWARD_QUERIES["named"]
    plan = " | ".join(row[3] for row in db.execute("EXPLAIN QUERY PLAN " + sql, [None, None]))
    assert "interaction_id=?" in plan and "TEMP B-TREE" not in plan, plan
    db.close()


async def test_an_old_sqlite_file_gets_its_indexes_from_its_records(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    store = SqliteStore(str(path))
    for name in ("a", "b"):
        assert await store.create(SessionRecord(name, "same", f"k-{name}"))
    await store.end("b")
    await store.close()
    db = sqlite3.connect(path, isolation_level=None)
    for index in ("sessions_identity", "sessions_unexported", "sessions_ready",
                  "sessions_active"):
        db.execute(f"DROP INDEX {index}")
    for column in ("identity", "exported", "ended_seq", "last_active_at"):
        db.execute(f"ALTER TABLE sessions DROP COLUMN {column}")
    db.close()
    reopened = SqliteStore(str(path))
    assert [r.session_id for r in await reopened.scan("identity", key="same", limit=9)] == [
        "a", "b"]
    assert [r.session_id for r in await reopened.scan("ready", limit=9)] == ["b"]
    assert len(await reopened.idle(10.0**12, 9)) == 2
    await reopened.close()


async def test_redis_sessions_stored_before_the_indexes_are_indexed_once(redis_url: str) -> None:
    import redis.asyncio as aioredis

    old = open_store(redis_url)
    for name in ("a", "b"):
        assert await old.create(SessionRecord(name, "same", f"k-{name}"))
    await old.end("b")
    await old.close()
    prefix = redis_url.split("prefix=")[1]
    raw = aioredis.Redis.from_url(redis_url.split("?")[0])
    # as a store from before: none of the new indexes, no marker
    await raw.delete(*(prefix + k for k in ("id:same", "unexp", "ready", "active", "idx:1")))
    await raw.aclose()
    reopened = open_store(redis_url)
    assert [r.session_id for r in await reopened.scan("identity", key="same", limit=9)] == [
        "a", "b"]
    assert [r.session_id for r in await reopened.scan("unexported", limit=9)] == ["a", "b"]
    assert [r.session_id for r in await reopened.scan("ready", limit=9)] == ["b"]
    assert len(await reopened.idle(10.0**12, 9)) == 2
    await reopened.close()
