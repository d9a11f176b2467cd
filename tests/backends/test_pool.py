"""UpstreamPool's health bookkeeping, in process (a scripted ``UpstreamClient`` as the
servers)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from seedproxy.errors import UpstreamUnavailable
from seedproxy.fleet.pool import UpstreamPool, rendezvous_order
from seedproxy.transport.body import UpstreamResponse
from seedproxy.wire.types import UpstreamRequest

URLS = ["http://a:1", "http://b:1"]


class Scripted:
    """An ``UpstreamClient`` whose servers answer ``answer(server)``: a response, or
    None for a refused connection."""

    def __init__(self, answer: Callable[[str], UpstreamResponse | None]) -> None:
        self.answer = answer

    async def post_stream(self, server: str, path: str, content: bytes,
                          headers: Mapping[str, str]) -> UpstreamResponse:
        return await self.request("POST", server, path, stream=True)

    async def request(self, method: str, server: str, path: str = "", **_: Any) -> UpstreamResponse:
        response = self.answer(server)
        if response is None:
            raise UpstreamUnavailable(f"upstream {server} unreachable: ConnectError")
        return response

    async def aclose(self) -> None:
        pass


def pool_with(health: dict[str, int | None]) -> UpstreamPool:
    """``health`` maps a server to its /health status, or None for a refused connection."""

    def answer(server: str) -> UpstreamResponse | None:
        status = health[server]
        return None if status is None else UpstreamResponse(status, [], content=b"")

    return UpstreamPool(URLS, Scripted(answer))


async def test_three_failed_probes_take_a_server_out_and_one_answer_puts_it_back() -> None:
    health: dict[str, int | None] = {"http://a:1": None, "http://b:1": 200}
    pool = pool_with(health)
    for expected in (True, True, False):
        await pool.probe()
        assert pool.upstreams[0].healthy is expected
    assert [u.url for u in pool.candidates("any")][-1] == "http://a:1"
    health["http://a:1"] = 200
    await pool.probe()
    assert pool.upstreams[0].healthy


async def test_a_server_without_a_health_route_counts_as_up_and_a_503_as_down() -> None:
    pool = pool_with({"http://a:1": 404, "http://b:1": 503})
    for _ in range(3):
        await pool.probe()
    assert [u.healthy for u in pool.upstreams] == [True, False]


class _Chunks:
    async def __aiter__(self) -> AsyncIterator[bytes]:  # a stream, open until closed
        yield b"data: {}\n\n"

    async def aclose(self) -> None:
        pass


async def test_a_server_that_leaves_drains_and_is_forgotten_after_its_last_request() -> None:
    pool = UpstreamPool(URLS, Scripted(lambda server: UpstreamResponse(200, [], _Chunks())))
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
