"""UpstreamPool's health bookkeeping, against real servers on 127.0.0.1."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from seedproxy.fleet.pool import UpstreamPool, rendezvous_order
from seedproxy.transport.http import UpstreamClient
from seedproxy.wire.types import UpstreamRequest
from tests.helpers.procs import free_port
from tests.helpers.servers import ServerThread


def _server(health: int, port: int = 0) -> ServerThread:
    """Answers ``/health`` with ``health``, and streams one event on ``/generate``,
    open until the client closes it."""

    async def probe(request: Request) -> Response:
        return Response(status_code=health)

    async def generate(request: Request) -> Response:
        async def chunks() -> AsyncIterator[bytes]:
            yield b"data: {}\n\n"
            await asyncio.sleep(30)

        return StreamingResponse(chunks(), media_type="text/event-stream")

    return ServerThread(Starlette(routes=[Route("/health", probe),
                                          Route("/generate", generate, methods=["POST"])]),
                        port=port)


def _client() -> UpstreamClient:
    return UpstreamClient(read_timeout_s=10, connect_timeout_s=2, environ={})


async def test_three_failed_probes_take_a_server_out_and_one_answer_puts_it_back() -> None:
    port = free_port()  # nothing listens there yet: refused
    with _server(200) as b:
        pool = UpstreamPool([f"http://127.0.0.1:{port}", b.url], _client())
        for expected in (True, True, False):
            await pool.probe()
            assert pool.upstreams[0].healthy is expected
        assert [u.url for u in pool.candidates("any")][-1] == f"http://127.0.0.1:{port}"
        with _server(200, port):
            await pool.probe()
        assert pool.upstreams[0].healthy
        await pool.client.aclose()


async def test_a_server_without_a_health_route_counts_as_up_and_a_503_as_down() -> None:
    with _server(404) as a, _server(503) as b:
        pool = UpstreamPool([a.url, b.url], _client())
        for _ in range(3):
            await pool.probe()
        assert [u.healthy for u in pool.upstreams] == [True, False]
        await pool.client.aclose()


async def test_a_server_that_leaves_drains_and_is_forgotten_after_its_last_request() -> None:
    with _server(200) as a, _server(200) as b:
        urls, c = [a.url, b.url], f"http://127.0.0.1:{free_port()}"
        pool = UpstreamPool(urls, _client())
        key = next(k for k in map(str, range(100)) if rendezvous_order(k, urls, str)[0] == b.url)
        request = UpstreamRequest("/generate", {"input_ids": [1]})
        reply = await pool.send(request, key=key, stream=True)  # open: b holds it
        upstream = pool.upstreams[1]
        assert (reply.upstream, upstream.inflight) == (b.url, 1)
        pool.set_members([a.url, c], weight_version="v2")
        assert [(u.url, u.draining) for u in pool.upstreams] == [
            (a.url, False), (b.url, True), (c, False)]
        assert pool.upstreams[2].weight_version == "v2"
        assert b.url not in [u.url for u in pool.candidates(key)]
        pool.set_members([a.url, b.url, c], weight_version="v2")
        assert pool.upstreams[1] is upstream and not upstream.draining  # named again: serves
        pool.set_members([c], weight_version="v2")
        assert [u.url for u in pool.upstreams] == [b.url, c]  # a held none
        await reply.aclose()
        assert [u.url for u in pool.upstreams] == [c]
        await pool.client.aclose()
