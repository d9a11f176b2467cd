"""UpstreamClient (transport/http.py) against real servers on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import threading
from collections.abc import AsyncIterator
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from seedproxy.transport.http import ConnectFailed, HTTPFailure, NoFreeConnection, TimedOut
from seedproxy.transport.http import UpstreamClient as Client
from tests.helpers.procs import free_port
from tests.helpers.servers import ServerThread

GATE = threading.Event()


def _app() -> Starlette:
    async def echo(request: Request) -> Response:
        body = await request.body()
        return JSONResponse(
            {
                "body": body.decode(),
                "peer": request.client.port if request.client else None,
                "headers": dict(request.headers),
            },
            headers={"set-cookie": "sid=secret"},
        )

    async def slow_stream(request: Request) -> Response:
        async def events() -> AsyncIterator[bytes]:
            for i in range(3):
                yield f"data: {i}\n\n".encode()
                await asyncio.sleep(0.3)

        return StreamingResponse(events(), media_type="text/event-stream")

    async def gated_stream(request: Request) -> Response:
        async def events() -> AsyncIterator[bytes]:
            yield b"data: 0\n\n"
            await asyncio.to_thread(GATE.wait, 30)  # until the test saw the first event
            yield b"data: 1\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    async def stall(request: Request) -> Response:
        await asyncio.sleep(5)
        return Response("late")

    async def gzipped(request: Request) -> Response:
        return Response(
            gzip.compress(b'{"zipped": true}'),
            headers={"content-encoding": "gzip"},
            media_type="application/json",
        )

    return Starlette(
        routes=[
            Route("/echo", echo, methods=["POST", "GET"]),
            Route("/gzip", gzipped, methods=["POST"]),
            Route("/stream", slow_stream, methods=["GET", "POST"]),
            Route("/gated", gated_stream, methods=["GET", "POST"]),
            Route("/stall", stall),
        ]
    )


@pytest.fixture(scope="module")
def server() -> Any:
    with ServerThread(_app()) as running:
        yield running


async def test_keeps_connections_alive_and_sends_body_and_headers(server: ServerThread) -> None:
    async with Client(read_timeout_s=10, connect_timeout_s=2) as client:
        peers = set()
        for i in range(5):
            answer = await client.request(
                "POST", server.url + "/echo", content=b"x" * i, headers={"x-test": str(i)}
            )
            assert answer.status_code == 200
            data = answer.json()
            assert data["body"] == "x" * i and data["headers"]["x-test"] == str(i)
            peers.add(data["peer"])
        assert len(peers) == 1  # one keep-alive connection served them all


async def test_send_sends_the_key_the_headers_and_the_hop_mark_last(
        server: ServerThread) -> None:
    headers = {"content-type": "application/json", "x-test": "1", "x-seedproxy-hop": "forged"}
    async with Client(read_timeout_s=10, connect_timeout_s=2, api_key="k", hop="mine") as client:
        seen = []
        for _ in range(3):
            response = await client.send(server.url + "/echo", b"{}", headers, stream=True)
            assert response.status_code == 200
            await response.aread()
            seen.append(response.json())
    assert all(data["body"] == "{}" for data in seen)
    sent = seen[0]["headers"]
    assert (sent["authorization"], sent["x-test"], sent["x-seedproxy-hop"]) == (
        "Bearer k", "1", "mine")
    assert len({data["peer"] for data in seen}) == 1  # still one connection


async def test_a_body_read_whole_is_decoded_from_its_content_encoding(
        server: ServerThread) -> None:
    async with Client(read_timeout_s=10, connect_timeout_s=2) as client:
        response = await client.send(server.url + "/gzip", b"", {}, stream=True)
        assert await response.aread() == b'{"zipped": true}'


async def test_never_sends_an_upstreams_cookies_back(server: ServerThread) -> None:
    async with Client(read_timeout_s=10, connect_timeout_s=2) as client:
        await client.request("POST", server.url + "/echo", content=b"")
        second = await client.request("POST", server.url + "/echo", content=b"")
        assert "cookie" not in second.json()["headers"]


async def test_streams_chunks_as_they_arrive(server: ServerThread) -> None:
    """The upstream sends its second event only once the client has the first, so a
    client that waited for more than what arrived would never see it alone."""
    GATE.clear()
    async with Client(read_timeout_s=60, connect_timeout_s=2) as client:
        response = await client.send(server.url + "/gated", b"", {}, stream=True)
        chunks = aiter(response)
        first = await anext(chunks)
        GATE.set()
        rest = b"".join([chunk async for chunk in chunks])
        await response.aclose()
    assert first == b"data: 0\n\n"
    assert rest == b"data: 1\n\n"


async def test_a_read_timeout_is_a_timeout(server: ServerThread) -> None:
    async with Client(read_timeout_s=0.3, connect_timeout_s=2) as client:
        with pytest.raises(TimedOut):
            await client.get(server.url + "/stall")


async def test_refused_connection_is_a_connect_failure() -> None:
    async with Client(read_timeout_s=2, connect_timeout_s=2) as client:
        with pytest.raises(ConnectFailed):
            await client.request("POST", f"http://127.0.0.1:{free_port()}/echo", content=b"")


async def test_an_idle_connection_the_server_closed_is_replaced() -> None:
    config_port = free_port()
    client = Client(read_timeout_s=5, connect_timeout_s=5)
    for _ in range(2):
        with ServerThread(_app(), port=config_port) as server:
            # the same client survives a restart of its upstream between requests
            answer = await client.request("POST", server.url + "/echo", content=b"a")
            assert answer.json()["body"] == "a"
        await asyncio.sleep(0.1)
    await client.aclose()


async def test_the_connection_limit_queues_then_times_out(server: ServerThread) -> None:
    async with Client(read_timeout_s=5, connect_timeout_s=5, max_connections=1,
                      pool_timeout_s=0.2) as client:
        held = await client.send(server.url + "/stream", b"", {}, stream=True)
        with pytest.raises(NoFreeConnection):
            await client.send(server.url + "/echo", b"", {}, stream=True)
        answer = await client.request("POST", server.url + "/echo", content=b"other lane")
        assert answer.json()["body"] == "other lane"  # the control plane still gets through
        with contextlib.suppress(HTTPFailure):
            await held.aclose()
        answer = await client.send(server.url + "/echo", b"ok", {}, stream=True)
        await answer.aread()
        assert answer.json()["body"] == "ok"
