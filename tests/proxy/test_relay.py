"""SSE pass-through: events reach the client as the upstream produces them, and a
client that leaves stops the upstream call and keeps its interaction."""

from __future__ import annotations

import threading
import time

import httpx

from tests.conftest import Fake

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}


def test_events_arrive_while_the_upstream_is_still_generating(proxy: str, fake: Fake) -> None:
    """The upstream holds its stream open before ``[DONE]`` until the client has read an
    event: a proxy that buffered the stream would deliver nothing (a read timeout)."""
    fake.switches.hold = threading.Event()
    with httpx.Client(base_url=proxy, timeout=30) as http:
        with http.stream(
            "POST", "/sessions/live/v1/chat/completions", json={**BODY, "max_tokens": 20}
        ) as answer:
            lines = (line for line in answer.iter_lines() if line.startswith("data:"))
            try:
                first = next(lines)
                assert not fake.switches.hold.is_set()  # the upstream has not finished
            finally:
                fake.switches.hold.set()
            rest = list(lines)
    assert first.startswith("data: {") and rest[-1] == "data: [DONE]"


def test_a_client_that_leaves_stops_the_stream_and_keeps_its_interaction(
    proxy: str, fake: Fake
) -> None:
    fake.switches.token_delay_s = 0.1
    with httpx.Client(base_url=proxy, timeout=30) as http:
        started = time.monotonic()
        with http.stream(
            "POST", "/sessions/gone/v1/chat/completions", json={**BODY, "max_tokens": 200}
        ) as answer:
            next(line for line in answer.iter_lines() if line.startswith("data: {"))
        # 200 tokens would take 20 s: the interaction must be recorded long before.
        interactions: list[object] = []
        while time.monotonic() - started < 10 and not interactions:
            interactions = http.get("/sessions/gone/trajectory").json()["interactions"]
            time.sleep(0.05)
        assert len(interactions) == 1 and time.monotonic() - started < 10
        after = http.post("/sessions/gone/v1/chat/completions", json={**BODY, "stream": False})
        assert after.status_code == 200 and after.headers["x-seedproxy-request-index"] == "1"


async def test_a_stream_abandoned_before_its_head_is_closed_and_recorded(fake: Fake) -> None:
    import orjson

    from seedproxy.proxy import create_app
    from seedproxy.settings import Settings

    app = create_app(Settings(upstream=[fake.url]))
    body = orjson.dumps({**BODY, "max_tokens": 4})
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/sessions/left/v1/chat/completions",
        "raw_path": b"",
        "root_path": "",
        "query_string": b"",
        "server": ("127.0.0.1", 80),
        "client": ("127.0.0.1", 1),
        "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ],
    }
    messages = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict[str, object]:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: dict[str, object]) -> None:
        raise OSError("client went away before the head")

    async with app.router.lifespan_context(app):
        try:
            await app(scope, receive, send)
        except OSError:
            pass
        interactions = await app.state.sessions.store.interactions("left")
    assert [(i.request_index, i.status) for i in interactions] == [(0, 499)]
    assert len(fake.received) == 1
