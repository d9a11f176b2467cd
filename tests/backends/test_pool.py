"""UpstreamPool's health bookkeeping, in process (httpx.MockTransport as the servers)."""

from __future__ import annotations

import httpx

from seedproxy.backends.pool import UpstreamPool

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
