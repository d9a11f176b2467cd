"""Limits: body size (413), open sessions (429 + Retry-After), upstream timeout (504),
and the session time-to-live."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import httpx
import pytest

from seedproxy.sessions import MemoryStore
from seedproxy.sessions.eviction import Evictor
from tests.conftest import Fake

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def assert_error(answer: httpx.Response, status: int) -> dict[str, object]:
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return error  # type: ignore[no-any-return]


def test_a_body_over_the_limit_is_413_and_uses_no_index(
    fake: Fake, start_proxy: Callable[..., str]
) -> None:
    url = start_proxy([fake.url], max_body_bytes=4096)
    big = {**BODY, "messages": [{"role": "user", "content": "x" * 5000}]}
    with httpx.Client(base_url=url, timeout=30) as http:
        assert_error(http.post("/sessions/s/v1/chat/completions", json=big), 413)
        # chunked (no content-length): the limit holds while reading
        chunks = iter([b'{"messages": [{"role": "user", "content": "', b"y" * 5000, b'"}]}'])
        assert_error(http.post("/sessions/s/v1/chat/completions", content=chunks), 413)
        ok = http.post("/sessions/s/v1/chat/completions", json=BODY)
        assert ok.headers["x-seedproxy-request-index"] == "0"
    assert len(fake.received) == 1


def test_over_the_open_session_cap_is_429_with_retry_after(
    fake: Fake, start_proxy: Callable[..., str]
) -> None:
    url = start_proxy([fake.url], max_open_sessions=2)
    with httpx.Client(base_url=url, timeout=30) as http:
        assert http.post("/sessions/a/v1/chat/completions", json=BODY).status_code == 200
        assert http.post("/sessions", json={"identity": "b"}).status_code == 201
        refused = http.post("/sessions/c/v1/chat/completions", json=BODY)
        assert_error(refused, 429)
        assert int(refused.headers["retry-after"]) >= 1
        assert_error(http.post("/sessions", json={"identity": "d"}), 429)
        # an existing session still works, and ending one frees a place
        assert http.post("/sessions/a/v1/chat/completions", json=BODY).status_code == 200
        http.post("/sessions/a/end")
        again = http.post("/sessions/c/v1/chat/completions", json=BODY)
        assert again.status_code == 200 and again.headers["x-seedproxy-request-index"] == "0"


def test_an_upstream_slower_than_the_read_timeout_is_504_and_keeps_its_index(
    fake: Fake, start_proxy: Callable[..., str]
) -> None:
    url = start_proxy([fake.url], read_timeout_s=0.2, connect_timeout_s=5.0, max_failover=0)
    fake.switches.token_delay_s = 0.2  # 8 tokens: 1.6 s, well past the 0.2 s read timeout
    with httpx.Client(base_url=url, timeout=30) as http:
        slow = http.post("/sessions/t/v1/chat/completions", json=BODY)
        error = assert_error(slow, 504)
        assert "timed out" in str(error["message"])
        assert slow.headers["x-seedproxy-request-index"] == "0"
        assert float(slow.headers["x-seedproxy-overhead-ms"]) >= 0
        fake.switches.token_delay_s = 0.0
        fast = http.post("/sessions/t/v1/chat/completions", json=BODY)
        assert fast.status_code == 200 and fast.headers["x-seedproxy-request-index"] == "1"
        trajectory = http.get("/sessions/t/trajectory").json()
    assert [(i["request_index"], i["status"]) for i in trajectory["interactions"]] == [
        (0, 504),
        (1, 200),
    ]


def test_sessions_past_their_ttl_are_evicted_and_unexported_ones_are_logged(
    fake: Fake, start_proxy: Callable[..., str], caplog: pytest.LogCaptureFixture
) -> None:
    """The rules, on a clock the test moves (no real TTL to race): the proxy's own store,
    filled over HTTP, swept as if the TTL had passed."""
    caplog.set_level(logging.INFO, logger="seedproxy.eviction")
    store = MemoryStore()
    url = start_proxy([fake.url], _app={"store": store})
    names = ("exported", "ended", "idle")
    first = time.time()  # every session's activity is at or after this
    with httpx.Client(base_url=url, timeout=30) as http:
        for name in names:
            assert http.post(f"/sessions/{name}/v1/chat/completions", json=BODY).status_code == 200
        http.post("/sessions/exported/end")
        http.post("/sessions/ended/end")
        taken = http.post("/trajectories/export", json={"session_ids": ["exported"]})
        assert len(taken.json()["trajectories"]) == 1
        acked = http.post("/trajectories/ack", json={"batch_id": taken.json()["batch_id"]})
        assert acked.status_code == 200  # exported once acknowledged
        now = time.time()  # ... and at or before this, however slow the requests were
        early = Evictor(store, 60.0, clock=lambda: first + 59.0)
        assert asyncio.run(early.sweep()) == []  # nothing is past its TTL yet
        late = Evictor(store, 60.0, clock=lambda: now + 61.0)
        assert asyncio.run(late.sweep()) == list(names)
        assert [http.get(f"/sessions/{n}").status_code for n in names] == [404] * 3
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(
        "ended" in m and "not exported" in m and "1 recorded" in m
        for m in warnings
        if "session ended " in m
    )
    assert any("idle and never ended" in m for m in warnings if "session idle " in m)
    assert not any("session exported " in m for m in warnings)
    assert any("evicting exported session exported" in r.getMessage() for r in caplog.records)


def test_rejected_requests_create_no_session_and_do_not_fill_the_cap(
    fake: Fake, start_proxy: Callable[..., str]
) -> None:
    url = start_proxy([fake.url], max_open_sessions=2)
    with httpx.Client(base_url=url, timeout=30) as http:
        for i in range(5):  # bad bodies, a bad pinned index, an oversized n: all 400
            assert_error(http.post(f"/sessions/junk{i}/v1/chat/completions", content=b"{"), 400)
            assert_error(
                http.post(
                    f"/sessions/pin{i}/v1/chat/completions",
                    json=BODY,
                    headers={"X-Request-Index": b"\xb2"},
                ),
                400,
            )
            assert_error(
                http.post(f"/sessions/n{i}/v1/chat/completions", json={**BODY, "n": 0}), 400
            )
            assert (
                http.get(f"/sessions/junk{i}/v1/models").status_code == 200
            )  # reads create nothing
        assert http.get("/sessions/junk0").status_code == 404
        for name in ("a", "b"):
            assert http.post(f"/sessions/{name}/v1/chat/completions", json=BODY).status_code == 200
        assert_error(http.post("/sessions/c/v1/chat/completions", json=BODY), 429)
    assert len(fake.received) == 2


def test_session_ttl_runs_an_evictor_in_the_proxy(
    fake: Fake, start_proxy: Callable[..., str]
) -> None:
    url = start_proxy([fake.url], session_ttl_s=0.2)
    with httpx.Client(base_url=url, timeout=30) as http:
        assert http.post("/sessions/brief/v1/chat/completions", json=BODY).status_code == 200
        deadline = time.monotonic() + 60  # a condition, not a bound: eviction happens
        while http.get("/sessions/brief").status_code != 404:
            assert time.monotonic() < deadline, "the session was never evicted"
            time.sleep(0.05)
