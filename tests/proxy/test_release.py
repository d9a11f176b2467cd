"""Every upstream answer is released on every path, and every stream is recorded.

Driven in process through the app's ASGI interface, with a ``send`` that raises
(the client is gone, as servers and middleware other than uvicorn may report it),
a backend with a bug between opening the answer and relaying it, and cancelled
requests. Each path runs more times than the upstream client has connection
permits (1,024): a leak would leave the final request waiting forever."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from seedproxy.dialects import Endpoint, StreamCapture
from seedproxy.dialects.sglang import SGLangBackend
from seedproxy.proxy import create_app
from seedproxy.settings import Settings
from tests.conftest import Fake

MSG = [{"role": "user", "content": "hi"}]
ROUNDS = 1100
"""More than the default upstream client's 1,024 connection permits."""
BATCH = 50
KINDS = {
    "single": ("/v1/chat/completions", {"model": "m", "messages": MSG, "max_tokens": 2}),
    "fanout": ("/v1/chat/completions", {"model": "m", "messages": MSG, "max_tokens": 2, "n": 2}),
    "responses": ("/v1/responses", {"model": "m", "input": "hi", "max_output_tokens": 2}),
}


class LeftAt(Exception):
    """The test's client is gone."""


async def call(
    app: Any, path: str, body: dict[str, Any], *, fail_at: int | None = None
) -> list[Any]:
    """Run one request in process; ``send`` raises on its ``fail_at``-th message."""
    raw = orjson.dumps(body)
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "server": ("127.0.0.1", 80),
        "client": ("127.0.0.1", 1),
        "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(raw)).encode()),
        ],
    }
    messages: list[dict[str, Any]] = [{"type": "http.request", "body": raw, "more_body": False}]
    sent: list[Any] = []
    gone = asyncio.Event()

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop(0)
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if fail_at is not None and len(sent) == fail_at:
            gone.set()
            raise LeftAt
        sent.append(message)

    try:
        await app(scope, receive, send)
    except LeftAt:
        pass
    gone.set()
    return sent


async def in_batches(count: int, job: Any) -> None:
    async with asyncio.timeout(300):  # a hang guard: with permits leaked, requests wait forever
        for start in range(0, count, BATCH):
            await asyncio.gather(*(job(i) for i in range(start, min(count, start + BATCH))))


async def assert_still_serves(app: Any) -> None:
    pool = app.state.pool
    assert [u.inflight for u in pool.upstreams] == [0]
    async with asyncio.timeout(60):  # a hang guard: a leaked permit would block here
        sent = await call(app, "/sessions/after/v1/chat/completions", KINDS["single"][1])
    assert sent[0]["status"] == 200


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("fail_at", [0, 1])
async def test_a_stream_whose_client_left_is_recorded_as_abandoned_and_released(
    fake: Fake, kind: str, fail_at: int
) -> None:
    """``fail_at=0``: sending the head failed; 1: the first event could not be sent."""
    app = create_app(Settings(upstream=[fake.url]))
    path, body = KINDS[kind]
    async with app.router.lifespan_context(app):
        await call(app, f"/sessions/left{fail_at}{path}", {**body, "stream": True}, fail_at=fail_at)
        interactions = await app.state.sessions.store.interactions(f"left{fail_at}")
        exported = [i.to_dict() for i in interactions]
        assert [(i["request_index"], i["status"], i["abandoned"]) for i in exported] == [
            (0, 499, True)
        ]
        assert [u.inflight for u in app.state.pool.upstreams] == [0]
        await assert_still_serves(app)
        done = await app.state.sessions.store.interactions("after")
        assert [(i.status, i.abandoned) for i in done] == [(200, False)]


@pytest.mark.parametrize("kind", list(KINDS))
async def test_streams_left_before_their_head_more_times_than_there_are_permits(
    fake: Fake, kind: str
) -> None:
    app = create_app(Settings(upstream=[fake.url]))
    path, body = KINDS[kind]

    async def job(i: int) -> None:
        await call(app, f"/sessions/s{i}{path}", {**body, "stream": True}, fail_at=0)

    async with app.router.lifespan_context(app):
        await in_batches(ROUNDS, job)
        await assert_still_serves(app)
        assert await app.state.sessions.store.count_open() == ROUNDS + 1


class BuggyCapture(SGLangBackend):
    """A backend with a bug that shows once an upstream stream is already open."""

    def stream_capture(self, endpoint: Endpoint, client_body: dict[str, Any]) -> StreamCapture:
        raise RuntimeError("a bug between opening the answer and relaying it")


@pytest.mark.parametrize("kind", list(KINDS))
async def test_a_bug_after_the_answer_opened_releases_it_every_time(fake: Fake, kind: str) -> None:
    app = create_app(Settings(upstream=[fake.url]), backend=BuggyCapture())
    path, body = KINDS[kind]

    async def job(i: int) -> None:
        sent = await call(app, f"/sessions/b{i % 7}{path}", {**body, "stream": True})
        assert sent[0]["status"] == 500

    async with app.router.lifespan_context(app):
        await in_batches(ROUNDS, job)
        assert [u.inflight for u in app.state.pool.upstreams] == [0]
        async with asyncio.timeout(60):
            sent = await call(
                app, "/v1/chat/completions", KINDS["single"][1]
            )  # no session: no capture
        assert sent[0]["status"] == 200


@pytest.mark.parametrize("stream", [False, True])
async def test_requests_cancelled_while_the_upstream_answers_release_everything(
    fake: Fake, stream: bool
) -> None:
    fake.switches.token_delay_s = 0.05  # 40 tokens: 2 s of answering, cut short by the cancel
    app = create_app(Settings(upstream=[fake.url]))
    path, body = KINDS["single"]
    body = {**body, "max_tokens": 40, "stream": stream}

    async def batch(start: int) -> None:
        before = len(fake.received)
        tasks = [
            asyncio.create_task(call(app, f"/sessions/c{start + i}{path}", body))
            for i in range(BATCH)
        ]
        async with asyncio.timeout(120):  # a request that never arrives fails, not hangs
            while len(fake.received) < before + BATCH:  # every request reached the upstream
                await asyncio.sleep(0.005)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with pytest.raises(asyncio.CancelledError):
                await task

    async with app.router.lifespan_context(app):
        for start in range(0, ROUNDS, BATCH):
            await batch(start)
        fake.switches.token_delay_s = 0.0
        await assert_still_serves(app)
