"""FastTransport and LeanClient against real servers on 127.0.0.1."""

from __future__ import annotations

import asyncio
import gzip
import threading
import zlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from seedproxy.transport.client import LeanClient, upstream_client
from seedproxy.transport.fast import FastTransport, Timeouts
from tests.helpers.procs import free_port
from tests.helpers.seam import fails_with
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

    async def deflated(request: Request) -> Response:
        """RFC 9110's deflate is zlib-wrapped; some servers send raw deflate under it."""
        packer = zlib.compressobj(wbits=-zlib.MAX_WBITS if "raw" in request.url.path else 15)
        return Response(packer.compress(b'{"deflated": true}') + packer.flush(),
                        headers={"content-encoding": "deflate"}, media_type="application/json")

    return Starlette(
        routes=[
            Route("/echo", echo, methods=["POST", "GET"]),
            Route("/gzip", gzipped, methods=["POST"]),
            Route("/deflate", deflated, methods=["POST"]),
            Route("/deflate-raw", deflated, methods=["POST"]),
            Route("/stream", slow_stream),
            Route("/gated", gated_stream),
            Route("/stall", stall),
        ]
    )


@pytest.fixture(scope="module")
def server() -> Any:
    with ServerThread(_app()) as running:
        yield running


async def test_keeps_connections_alive_and_sends_body_and_headers(server: ServerThread) -> None:
    async with upstream_client(read_timeout_s=10, connect_timeout_s=2) as client:
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


async def test_post_stream_sends_what_a_control_request_sends(server: ServerThread) -> None:
    headers = {"content-type": "application/json", "authorization": "Bearer k", "x-test": "1"}
    async with upstream_client(read_timeout_s=10, connect_timeout_s=2) as client:
        built = await client.request("POST", server.url + "/echo", content=b"{}", headers=headers)
        expected = built.json()
        seen = []
        for _ in range(3):
            response = await client.post_stream(server.url, "/echo", b"{}", headers)
            assert response.status_code == 200
            await response.aread()
            assert response.is_closed
            seen.append(response.json())
    assert all(data["body"] == "{}" for data in seen)
    assert all(data["headers"] == expected["headers"] for data in seen)
    assert {data["peer"] for data in seen} == {expected["peer"]}  # still one connection


async def test_aread_still_decodes_a_content_encoding(server: ServerThread) -> None:
    async with upstream_client(read_timeout_s=10, connect_timeout_s=2) as client:
        response = await client.post_stream(server.url, "/gzip", b"", {})
        assert await response.aread() == b'{"zipped": true}'
        for path in ("/deflate", "/deflate-raw"):
            response = await client.post_stream(server.url, path, b"", {})
            assert await response.aread() == b'{"deflated": true}'


async def test_never_sends_an_upstreams_cookies_back(server: ServerThread) -> None:
    async with upstream_client(read_timeout_s=10, connect_timeout_s=2) as client:
        await client.request("POST", server.url + "/echo", content=b"")
        second = await client.request("POST", server.url + "/echo", content=b"")
        assert "cookie" not in second.json()["headers"]


async def test_streams_chunks_as_they_arrive(server: ServerThread) -> None:
    """The upstream sends its second event only once the client has the first, so a
    transport that waited for more than what arrived would never see it alone."""
    GATE.clear()
    async with upstream_client(read_timeout_s=60, connect_timeout_s=2) as client:
        response = await client.request("GET", server.url + "/gated", stream=True)
        chunks = response.aiter_bytes()
        first = await anext(chunks)
        GATE.set()
        rest = b"".join([chunk async for chunk in chunks])
        await response.aclose()
    assert first == b"data: 0\n\n"
    assert rest == b"data: 1\n\n"


async def test_read_timeout_is_an_httpx_timeout(server: ServerThread) -> None:
    async with upstream_client(read_timeout_s=0.3, connect_timeout_s=2) as client:
        with fails_with(httpx.ReadTimeout):
            await client.request("GET", server.url + "/stall")


async def test_refused_connection_is_a_connect_error() -> None:
    async with upstream_client(read_timeout_s=2, connect_timeout_s=2) as client:
        with fails_with(httpx.ConnectError):
            await client.request("POST", f"http://127.0.0.1:{free_port()}/echo", content=b"")


async def test_an_idle_connection_the_server_closed_is_replaced() -> None:
    config_port = free_port()
    for attempt in range(2):
        with ServerThread(_app(), port=config_port) as server:
            # the same client survives a restart of its upstream between requests
            if attempt == 0:
                client = LeanClient(timeouts=Timeouts(5, 5, 5), transport=FastTransport())
            answer = await client.request("POST", server.url + "/echo", content=b"a")
            assert answer.json()["body"] == "a"
        await asyncio.sleep(0.1)
    await client.aclose()


async def test_the_connection_limit_queues_then_times_out(server: ServerThread) -> None:
    transport = FastTransport(max_control_connections=1)  # request: not a proxied request
    async with LeanClient(timeouts=Timeouts(5, 5, 0.2), transport=transport) as client:
        held = await client.request("GET", server.url + "/stream", stream=True)
        with fails_with(httpx.PoolTimeout):
            await client.request("POST", server.url + "/echo", content=b"")
        await held.aclose()
        answer = await client.request("POST", server.url + "/echo", content=b"ok")
        assert answer.json()["body"] == "ok"
