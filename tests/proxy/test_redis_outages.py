"""Redis outages, with a real redis-server paused (SIGSTOP) or restarted mid-request:
what the client is told and what is recorded agree, a stream whose record fails ends
with an SSE error event, and a restarted Redis is reconnected to, not a 503."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import orjson
import pytest

from tests.conftest import Fake
from tests.helpers.redis_server import RedisServer, redis_or_skip
from tests.helpers.waiting import wait_until

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


@pytest.fixture
def redis() -> Iterator[RedisServer]:
    """A redis-server of this test's own: the tests stop and pause it."""
    server = RedisServer(redis_or_skip())
    yield server
    server.resume()
    server.stop()


@pytest.fixture
def proxy_on(redis: RedisServer, fake: Fake, start_proxy: Callable[..., str]) -> str:
    proxy = start_proxy([fake.url], store=f"{redis.url}?prefix=out:&timeout_s=1")
    assert httpx.post(f"{proxy}/sessions", json={"session_id": "r"}).status_code == 201
    return proxy



class InFlight:
    """One request to the proxy, sent from a thread and held by the fake upstream
    (``hold``) until the test has broken Redis."""

    def __init__(
        self, proxy: str, fake: Fake, *, stream: bool, route: str = "v1/chat/completions",
        body: dict[str, Any] | None = None, upstream_calls: int = 1,
    ) -> None:
        fake.switches.hold = threading.Event()
        self._fake = fake
        self.status = 0
        self.body = b""
        url = f"{proxy}/sessions/r/{route}"
        before = len(fake.received)
        sent = {**(body or BODY), "stream": stream}
        self._thread = threading.Thread(target=self._send, args=(url, sent))
        self._thread.start()
        # the upstream has it (each of its calls), held
        wait_until(lambda: len(fake.received) == before + upstream_calls)

    def _send(self, url: str, body: dict[str, Any]) -> None:
        with httpx.stream("POST", url, json=body, timeout=60) as answer:
            self.status = answer.status_code
            self.body = answer.read()

    def release(self) -> InFlight:
        assert self._fake.switches.hold is not None
        self._fake.switches.hold.set()
        self._thread.join(timeout=60)
        assert not self._thread.is_alive()
        return self

    def events(self) -> list[Any]:
        return [orjson.loads(line[6:]) if line != b"data: [DONE]" else "[DONE]"
                for line in self.body.splitlines() if line.startswith(b"data: ")]


def recorded(proxy: str) -> list[tuple[int, int]]:
    answer = httpx.get(f"{proxy}/sessions/r/trajectory", timeout=30)
    assert answer.status_code == 200, answer.text
    return [(i["request_index"], i["status"]) for i in answer.json()["interactions"]]


def test_a_request_told_503_while_redis_was_paused_is_not_recorded_later(
    redis: RedisServer, fake: Fake, proxy_on: str
) -> None:
    first = httpx.post(f"{proxy_on}/sessions/r/v1/chat/completions", json=BODY, timeout=30)
    assert first.status_code == 200  # (and Redis has the record script loaded)
    request = InFlight(proxy_on, fake, stream=False)
    redis.pause()  # the record will sit in Redis's socket buffer
    request.release()
    assert request.status == 503
    assert orjson.loads(request.body)["error"]["type"] == "store_error"
    redis.resume()  # the buffered record now runs (before any later command)
    assert recorded(proxy_on) == [(0, 200)]


def test_a_stream_recorded_across_a_redis_restart_ends_normally(
    redis: RedisServer, fake: Fake, proxy_on: str
) -> None:
    request = InFlight(proxy_on, fake, stream=True)
    redis.shut_down()
    redis.start_again()  # the proxy's pooled connections are now dead
    request.release()
    assert request.status == 200
    assert request.events()[-1] == "[DONE]"
    assert recorded(proxy_on) == [(0, 200)]


@pytest.mark.parametrize(
    ("route", "body", "calls"),
    [
        ("v1/chat/completions", BODY, 1),
        ("v1/chat/completions", {**BODY, "n": 2}, 2),  # fan-out: one upstream call a choice
        ("v1/responses", {"model": "m", "input": "hi", "max_output_tokens": 4}, 1),
    ],
    ids=["chat", "fan-out", "responses"],
)
def test_a_stream_whose_record_fails_ends_with_an_error_event_and_no_200(
    redis: RedisServer, fake: Fake, proxy_on: str, route: str, body: dict[str, Any], calls: int
) -> None:
    request = InFlight(proxy_on, fake, stream=True, route=route, body=body, upstream_calls=calls)
    redis.shut_down()
    request.release()
    events = request.events()
    assert "[DONE]" not in events
    last = events[-1]
    assert last["error"]["type"] == "store_error"  # told, not a silent cut
    assert not any(isinstance(e, dict) and e.get("type") == "response.completed" for e in events)
    redis.start_again()
    assert all(status != 200 for _, status in recorded(proxy_on))


def test_the_first_request_after_a_redis_restart_is_served(
    redis: RedisServer, proxy_on: str
) -> None:
    url = f"{proxy_on}/sessions/r/v1/chat/completions"
    assert httpx.post(url, json=BODY, timeout=30).status_code == 200
    redis.shut_down()
    redis.start_again()
    again = httpx.post(url, json=BODY, timeout=30)
    assert again.status_code == 200, again.text
    assert [index for index, _ in recorded(proxy_on)] == [0, 1]


def test_readiness_says_not_ready_while_the_store_is_down(
    redis: RedisServer, proxy_on: str
) -> None:
    """Every session request is a 503 while Redis is down: /readyz says so too."""
    ready = httpx.get(f"{proxy_on}/readyz", timeout=30)
    assert ready.status_code == 200 and ready.json()["store"] == {"up": True, "reason": None}
    redis.pause()
    try:
        down = httpx.get(f"{proxy_on}/readyz", timeout=30)
    finally:
        redis.resume()
    assert down.status_code == 503, down.text
    assert down.json()["ready"] is False and down.json()["store"]["up"] is False
    assert down.json()["upstreams"][0]["up"] is True
    assert httpx.get(f"{proxy_on}/readyz", timeout=30).status_code == 200
