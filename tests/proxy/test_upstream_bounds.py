"""An upstream answer larger than ``--max-upstream-body-bytes`` (a whole body, or one SSE
event that never ends) is a 502 in OpenAI's shape, recorded as such, and the proxy
answers as soon as the bound is passed: it never waits for (or buffers) the rest.

The upstream sends three times the bound, then holds the rest back until the test has
its answer: a proxy that read the whole body first would never answer."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Iterator

import httpx
import orjson
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from tests.helpers.servers import ServerThread

LIMIT = 1_000_000


class Sent:
    bytes = 0
    gate = threading.Event()


@pytest.fixture
def flood() -> Iterator[tuple[str, Sent]]:
    sent = Sent()

    async def answer(request: Request) -> Response:
        stream = orjson.loads(await request.body()).get("stream")
        sent.bytes = 0

        async def body() -> AsyncIterator[bytes]:
            if stream:  # one event that never reaches its blank line
                yield b'data: {"choices": [{"index": 0, "delta": {"content": "'
            else:
                yield b'{"choices": [{"index": 0, "message": {"content": "'
            while sent.bytes < 3 * LIMIT:
                sent.bytes += 65536
                yield b"x" * 65536
            await asyncio.to_thread(sent.gate.wait, 60)
            yield b"x" * 65536 + b'"}}]}\n\n'

        media = "text/event-stream" if stream else "application/json"
        return StreamingResponse(body(), media_type=media)

    app = Starlette(routes=[Route("/v1/chat/completions", answer, methods=["POST"])])
    with ServerThread(app) as server:
        try:
            yield server.url, sent
        finally:
            sent.gate.set()


@pytest.mark.parametrize("stream", [False, True])
def test_an_oversized_upstream_answer_is_a_502_and_is_not_buffered(
    flood: tuple[str, Sent], start_proxy: Callable[..., str], stream: bool
) -> None:
    url, sent = flood
    proxy = start_proxy([url], max_upstream_body_bytes=LIMIT)
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": stream}
    sent.gate.clear()
    with httpx.Client(base_url=proxy, timeout=30) as http:
        response = http.post("/sessions/big/v1/chat/completions", json=body)
        sent.gate.set()
        if stream:
            assert response.status_code == 200  # the head went out before the flood
            events = [e for e in response.text.split("\n\n") if e.strip()]
            error = orjson.loads(events[-1].removeprefix("data: "))
            assert len(events) == 1 and set(error["error"]) == {"message", "type", "param", "code"}
        else:
            assert response.status_code == 502
            assert f"over {LIMIT} bytes" in response.json()["error"]["message"]
            assert set(response.json()["error"]) == {"message", "type", "param", "code"}
        interactions = http.get("/sessions/big/trajectory").json()["interactions"]
    assert [i["status"] for i in interactions] == [502]
