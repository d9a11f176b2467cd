"""The viewer's token text: one ``/ui/api/detokenize`` call of ``--ids`` distinct ids
through a real proxy, against the baseline of one upstream request per id (16 at a
time on the proxy's upstream client, as the viewer's decoder asked before), both to
the test suite's fake SGLang under uvicorn, measured in the same run. Also an upstream
that cannot detokenize: ``--calls`` calls, counting the requests it receives.

    python bench/detokenize.py [--ids 8192] [--calls 10] [--repeat 1]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]

from seedproxy.proxy import create_app  # noqa: E402
from seedproxy.settings import Settings  # noqa: E402
from seedproxy.transport.client import upstream_client  # noqa: E402
from tests.helpers.fake_sglang import Switches, create_fake_sglang  # noqa: E402
from tests.helpers.servers import ServerThread  # noqa: E402


async def per_id(upstream: str, ids: list[int]) -> float:
    """The baseline: each id its own ``/detokenize`` request, 16 in flight, on the
    proxy's own upstream client."""
    limit = asyncio.Semaphore(16)
    async with upstream_client(read_timeout_s=60, connect_timeout_s=10) as client:
        async def one(token: int) -> None:
            async with limit:
                answer = await client.request("POST", upstream, "/detokenize",
                                              json={"tokens": [token]})
                assert answer.status_code == 200, answer.status_code

        start = time.perf_counter()
        await asyncio.gather(*(one(i) for i in ids))
        return time.perf_counter() - start


def batched(upstream: str, ids: list[int]) -> float:
    """One call through a fresh proxy (nothing cached)."""
    with ServerThread(create_app(Settings(upstream=[upstream]))) as proxy:
        start = time.perf_counter()
        answer = httpx.post(proxy.url + "/ui/api/detokenize", json={"ids": ids}, timeout=120)
        elapsed = time.perf_counter() - start
        assert answer.status_code == 200 and len(answer.json()["tokens"]) == len(set(ids))
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ids", type=int, default=8192)
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    ids = list(range(args.ids))
    switches = Switches()
    with ServerThread(create_fake_sglang(switches)) as fake:
        base = [asyncio.run(per_id(fake.url, ids)) for _ in range(args.repeat)]
        base_requests = len(switches.detokenized) // args.repeat
        switches.detokenized.clear()
        new = [batched(fake.url, ids) for _ in range(args.repeat)]
        new_requests = len(switches.detokenized) // args.repeat
        switches.detokenized.clear()
        switches.detokenize = False
        with ServerThread(create_app(Settings(upstream=[fake.url]))) as proxy:
            for _ in range(args.calls):
                httpx.post(proxy.url + "/ui/api/detokenize", json={"ids": ids}, timeout=120)
        failing = len(switches.detokenized)
    b, n = statistics.median(base), statistics.median(new)
    print(f"{args.ids} distinct ids: per-id baseline {b * 1000:.0f} ms ({base_requests} "
          f"upstream requests), one call {n * 1000:.0f} ms ({new_requests} request): "
          f"{b / n:.1f}x faster")
    print(f"an upstream that cannot detokenize, {args.calls} calls: {failing} upstream "
          f"request(s) (baseline: {args.calls * args.ids})")


if __name__ == "__main__":
    main()
