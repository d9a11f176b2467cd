"""FastTransport and LeanClient against real servers on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from seedproxy.backends.client import LeanClient, upstream_client
from seedproxy.backends.transport import FastTransport, read_response
from tests.helpers.procs import free_port
from tests.helpers.servers import ServerThread


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
            Route("/stream", slow_stream),
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
            request = client.build_request(
                "POST", server.url + "/echo", content=b"x" * i, headers={"x-test": str(i)}
            )
            answer = await client.send(request)
            assert answer.status_code == 200
            data = answer.json()
            assert data["body"] == "x" * i and data["headers"]["x-test"] == str(i)
            peers.add(data["peer"])
        assert len(peers) == 1  # one keep-alive connection served them all


async def test_post_stream_sends_what_an_httpx_request_sends(server: ServerThread) -> None:
    headers = {"content-type": "application/json", "authorization": "Bearer k", "x-test": "1"}
    async with upstream_client(read_timeout_s=10, connect_timeout_s=2) as client:
        built = client.build_request("POST", server.url + "/echo", content=b"{}", headers=headers)
        expected = (await client.send(built)).json()
        seen = []
        for _ in range(3):
            response = await client.post_stream(server.url + "/echo", b"{}", headers)
            assert response.status_code == 200
            await read_response(response)
            assert response.is_closed
            seen.append(response.json())
    assert all(data["body"] == "{}" for data in seen)
    assert all(data["headers"] == expected["headers"] for data in seen)
    assert {data["peer"] for data in seen} == {expected["peer"]}  # still one connection


async def test_read_response_still_decodes_a_content_encoding(server: ServerThread) -> None:
    async with upstream_client(read_timeout_s=10, connect_timeout_s=2) as client:
        response = await client.post_stream(server.url + "/gzip", b"", {})
        assert await read_response(response) == b'{"zipped": true}'


async def test_never_sends_an_upstreams_cookies_back(server: ServerThread) -> None:
    async with upstream_client(read_timeout_s=10, connect_timeout_s=2) as client:
        await client.send(client.build_request("POST", server.url + "/echo", content=b""))
        second = await client.send(client.build_request("POST", server.url + "/echo", content=b""))
        assert "cookie" not in second.json()["headers"]


async def test_streams_chunks_as_they_arrive(server: ServerThread) -> None:
    async with upstream_client(read_timeout_s=10, connect_timeout_s=2) as client:
        response = await client.send(
            client.build_request("GET", server.url + "/stream"), stream=True
        )
        started = time.monotonic()
        arrivals = []
        async for chunk in response.aiter_raw():
            arrivals.append((chunk, time.monotonic() - started))
        await response.aclose()
    assert b"".join(c for c, _ in arrivals) == b"data: 0\n\ndata: 1\n\ndata: 2\n\n"
    assert arrivals[0][1] < 0.25  # the first event did not wait for the others


async def test_read_timeout_is_an_httpx_timeout(server: ServerThread) -> None:
    async with upstream_client(read_timeout_s=0.3, connect_timeout_s=2) as client:
        with pytest.raises(httpx.ReadTimeout):
            await client.send(client.build_request("GET", server.url + "/stall"))


async def test_refused_connection_is_a_connect_error() -> None:
    async with upstream_client(read_timeout_s=2, connect_timeout_s=2) as client:
        with pytest.raises(httpx.ConnectError):
            await client.send(
                client.build_request("POST", f"http://127.0.0.1:{free_port()}/echo", content=b"")
            )


async def test_an_idle_connection_the_server_closed_is_replaced() -> None:
    config_port = free_port()
    for attempt in range(2):
        with ServerThread(_app(), port=config_port) as server:
            # the same client survives a restart of its upstream between requests
            if attempt == 0:
                client = LeanClient(timeout=httpx.Timeout(5), transport=FastTransport())
            answer = await client.send(
                client.build_request("POST", server.url + "/echo", content=b"a")
            )
            assert answer.json()["body"] == "a"
        await asyncio.sleep(0.1)
    await client.aclose()


async def test_https_goes_to_the_fallback_transport() -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(200, json={"ok": True})

    transport = FastTransport(fallback=httpx.MockTransport(handler))
    async with LeanClient(timeout=httpx.Timeout(5), transport=transport) as client:
        answer = await client.get("https://upstream.example/v1/models")
    assert answer.json() == {"ok": True} and seen == ["https://upstream.example/v1/models"]


async def test_the_connection_limit_queues_then_times_out(server: ServerThread) -> None:
    transport = FastTransport(max_connections=1)
    async with LeanClient(timeout=httpx.Timeout(5, pool=0.2), transport=transport) as client:
        held = await client.send(client.build_request("GET", server.url + "/stream"), stream=True)
        with pytest.raises(httpx.PoolTimeout):
            await client.send(client.build_request("POST", server.url + "/echo", content=b""))
        with contextlib.suppress(httpx.HTTPError):
            await held.aclose()
        answer = await client.send(
            client.build_request("POST", server.url + "/echo", content=b"ok")
        )
        assert answer.json()["body"] == "ok"
