"""UpstreamPool's health bookkeeping, in process (httpx.MockTransport as the servers)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx

from seedproxy.fleet.pool import UpstreamPool, rendezvous_order
from seedproxy.wire.types import UpstreamRequest

URLS = ["http://a:1", "http://b:1"]


def pool_with(health: dict[str, int | None]) -> UpstreamPool:
    """``health`` maps a host to its /health status, or None for a refused connection."""

    def handler(request: httpx.Request) -> httpx.Response:
        status = health[request.url.host]
        if status is None:
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(status)

    return UpstreamPool(URLS, httpx.AsyncClient(transport=httpx.MockTransport(handler)))


async def test_three_failed_probes_take_a_server_out_and_one_answer_puts_it_back() -> None:
    health: dict[str, int | None] = {"a": None, "b": 200}
    pool = pool_with(health)
    for expected in (True, True, False):
        await pool.probe()
        assert pool.upstreams[0].healthy is expected
    assert [u.url for u in pool.candidates("any")][-1] == "http://a:1"
    health["a"] = 200
    await pool.probe()
    assert pool.upstreams[0].healthy


async def test_a_server_without_a_health_route_counts_as_up_and_a_503_as_down() -> None:
    pool = pool_with({"a": 404, "b": 503})
    for _ in range(3):
        await pool.probe()
    assert [u.healthy for u in pool.upstreams] == [True, False]


async def test_a_server_that_leaves_drains_and_is_forgotten_after_its_last_request() -> None:
    async def chunks() -> AsyncIterator[bytes]:  # a stream, open until closed
        yield b"data: {}\n\n"

    pool = UpstreamPool(URLS, httpx.AsyncClient(transport=httpx.MockTransport(
        lambda request: httpx.Response(200, content=chunks()))))
    key = next(k for k in map(str, range(100)) if rendezvous_order(k, URLS, str)[0] == URLS[1])
    request = UpstreamRequest("/generate", {"input_ids": [1]})
    reply = await pool.send(request, key=key, stream=True)  # open: b holds it
    b = pool.upstreams[1]
    assert (reply.upstream, b.inflight) == (URLS[1], 1)
    pool.set_members(["http://a:1", "http://c:1"], weight_version="v2")
    assert [(u.url, u.draining) for u in pool.upstreams] == [
        ("http://a:1", False), ("http://b:1", True), ("http://c:1", False)]
    assert pool.upstreams[2].weight_version == "v2"
    assert URLS[1] not in [u.url for u in pool.candidates(key)]
    pool.set_members(["http://a:1", "http://b:1", "http://c:1"], weight_version="v2")
    assert pool.upstreams[1] is b and not b.draining  # named again: it serves again
    pool.set_members(["http://c:1"], weight_version="v2")
    assert [u.url for u in pool.upstreams] == ["http://b:1", "http://c:1"]  # a held none
    await reply.aclose()
    assert [u.url for u in pool.upstreams] == ["http://c:1"]
