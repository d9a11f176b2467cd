"""A waiting export is woken by the store, over real HTTP: in one proxy, and across two
``seedproxy serve`` replicas on one Redis (the end told to one wakes the export waiting
on the other, through Redis pub/sub). Nothing polls: the exports ask to wait 600 s, and
the test fails if they are not back within ``WAIT_S`` of the end."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import redis

from seedproxy.sessions import open_store
from seedproxy.sessions.store.changes import Watch
from tests.conftest import Fake
from tests.helpers.waiting import wait_until
from tests.proxy.test_fleet_replicas import Replica, start_replicas  # noqa: F401  (fixture)

WAIT_S = 30.0


class Watched:
    """A store whose ``opened`` (a thread event) is set once an export's watch is open."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.opened = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    @contextlib.asynccontextmanager
    async def watch(self) -> AsyncIterator[Watch]:
        async with self.inner.watch() as watch:
            self.opened.set()
            yield watch


def export_in_background(url: str, body: dict[str, Any]) -> tuple[threading.Thread, list[Any]]:
    got: list[Any] = []

    def run() -> None:
        got.append(httpx.post(url + "/trajectories/export", json=body, timeout=700))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, got


def chat(url: str, session: str) -> None:
    answer = httpx.post(f"{url}/sessions/{session}/v1/chat/completions", timeout=30, json={
        "model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
    assert answer.status_code == 200, answer.text


def test_a_waiting_export_returns_when_the_session_ends(
    fake: Fake, start_proxy: Callable[..., str]
) -> None:
    store = Watched(open_store("memory://"))
    proxy = start_proxy([fake.url], _app={"store": store})
    chat(proxy, "s1")
    thread, got = export_in_background(proxy, {"count": 1, "timeout_s": 600})
    assert store.opened.wait(WAIT_S)  # it found nothing and waits on the store
    assert not got
    httpx.post(proxy + "/sessions/s1/end").raise_for_status()
    thread.join(WAIT_S)
    assert got, "the export was not woken by the end"
    answer = got[0].json()
    assert [t["session_id"] for t in answer["trajectories"]] == ["s1"]


def test_an_end_on_one_replica_wakes_an_export_waiting_on_another(
    fake: Fake, redis_url: str, request: pytest.FixtureRequest
) -> None:
    start: Callable[..., list[Replica]] = request.getfixturevalue("start_replicas")
    url = redis_url + "&watch_check_s=3600"  # no version backstop: only pub/sub can wake it
    a, b = start(url, [], [])
    chat(b.url, "r1")
    prefix = dict(p.split("=") for p in urlsplit(url).query.split("&"))["prefix"]
    probe = redis.Redis.from_url(redis_url.split("?")[0])
    try:
        thread, got = export_in_background(a.url, {"count": 1, "timeout_s": 600})
        wait_until(lambda: dict(probe.pubsub_numsub(prefix + "changes"))
                   .get((prefix + "changes").encode(), 0) >= 1, WAIT_S)
        assert not got
        httpx.post(b.url + "/sessions/r1/end", timeout=30).raise_for_status()
        thread.join(WAIT_S)
        assert got, "the export on replica a was not woken by the end on replica b"
        assert [t["session_id"] for t in got[0].json()["trajectories"]] == ["r1"]
    finally:
        probe.close()
