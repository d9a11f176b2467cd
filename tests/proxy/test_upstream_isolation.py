"""One upstream's hung requests never stall another's: each upstream has its own
connection limit, a request that finds none free waits ``pool_timeout_s`` and then
fails over, and a server whose requests all time out is degraded in ``/fleet`` and
``/readyz`` until it answers again."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from seedproxy import derive_seed
from seedproxy.fleet.pool import rendezvous_order
from tests.conftest import Fake
from tests.helpers.fake_sglang import Switches, create_fake_sglang
from tests.helpers.servers import ServerThread
from tests.helpers.waiting import wait_until

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}


@pytest.fixture
def second() -> Iterator[Fake]:
    switches = Switches(name="fake-b")
    with ServerThread(create_fake_sglang(switches)) as server:
        yield Fake(server, switches)


def pinned(first: str, urls: list[str], count: int) -> list[str]:
    """``count`` session ids whose sticky upstream is ``first``."""
    ids = (f"s{i}" for i in range(10_000))
    return [sid for sid in ids if rendezvous_order(sid, urls, lambda u: u)[0] == first][:count]


def chat(proxy: str, session_id: str) -> httpx.Response:
    with httpx.Client(timeout=120) as client:
        return client.post(f"{proxy}/sessions/{session_id}/v1/chat/completions", json=CHAT)


def upstream_states(proxy: str) -> dict[str, tuple[bool, Any]]:
    fleet = httpx.get(f"{proxy}/fleet").json()["upstreams"]
    return {u["url"]: (u["degraded"], u["inflight"]) for u in fleet}


def test_a_hung_upstream_holds_up_neither_another_nor_its_own_sessions(
    fake: Fake, second: Fake, start_proxy: Callable[..., str]
) -> None:
    hung, healthy = fake, second
    urls = [hung.url, healthy.url]
    proxy = start_proxy(urls, max_upstream_connections=2, pool_timeout_s=0.2,
                        health_interval_s=3600)
    hung.switches.hold = threading.Event()
    on_hung = pinned(hung.url, urls, 6)
    on_healthy = pinned(healthy.url, urls, 1)
    with ThreadPoolExecutor(2) as pool:
        held: list[Future[httpx.Response]] = [
            pool.submit(chat, proxy, sid) for sid in on_hung[:2]]
        try:
            wait_until(lambda: len(hung.received) == 2)  # every connection to it is held
            # A session of the healthy server is answered at once, by it.
            answer = chat(proxy, on_healthy[0])
            assert answer.status_code == 200
            assert answer.headers["x-seedproxy-upstream"] == healthy.url
            # The hung server's own sessions wait for a connection, then fail over
            # with their own seeds; its held requests are still outstanding.
            for sid in on_hung[2:5]:
                moved = chat(proxy, sid)
                assert moved.status_code == 200, moved.text
                assert moved.headers["x-seedproxy-upstream"] == healthy.url
                assert moved.headers["x-seedproxy-seed"] == str(derive_seed(sid, 0))
                assert healthy.received[-1]["seed"] == derive_seed(sid, 0)
            assert not any(f.done() for f in held)
            assert len(hung.received) == 2  # nothing more reached it
            # Three requests in a row got no answer from it: degraded, yet ready.
            assert upstream_states(proxy) == {hung.url: (True, 2), healthy.url: (False, 0)}
            ready = httpx.get(f"{proxy}/readyz")
            assert ready.status_code == 200
            assert [(u["url"], u["up"], u["degraded"]) for u in ready.json()["upstreams"]] == [
                (hung.url, True, True), (healthy.url, True, False)]
            # Degraded and busy, it is passed over without a wait.
            skipped = chat(proxy, on_hung[5])
            assert skipped.headers["x-seedproxy-upstream"] == healthy.url
            assert len(hung.received) == 2
        finally:
            hung.switches.hold.set()
        assert [f.result().status_code for f in held] == [200, 200]
    # Idle again, it is tested by the next request of its sessions, and answers.
    back = chat(proxy, on_hung[0])
    assert back.headers["x-seedproxy-upstream"] == hung.url
    assert upstream_states(proxy) == {hung.url: (False, 0), healthy.url: (False, 0)}


def test_a_server_whose_requests_all_time_out_is_degraded_and_not_ready(
    fake: Fake, start_proxy: Callable[..., str]
) -> None:
    proxy = start_proxy([fake.url], read_timeout_s=0.3)
    fake.switches.hold = threading.Event()
    try:
        for i in range(3):
            assert chat(proxy, f"t{i}").status_code == 504
        assert upstream_states(proxy) == {fake.url: (True, 0)}
        ready = httpx.get(f"{proxy}/readyz")
        assert ready.status_code == 503
        assert ready.json()["upstreams"] == [{
            "url": fake.url, "up": True, "degraded": True,
            "reason": "degraded: its recent requests all timed out"}]
        assert httpx.get(f"{proxy}/healthz").status_code == 200
    finally:
        fake.switches.hold.set()
    assert chat(proxy, "t3").status_code == 200
    assert upstream_states(proxy) == {fake.url: (False, 0)}
    assert httpx.get(f"{proxy}/readyz").status_code == 200
