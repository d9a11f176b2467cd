"""Which upstream HTTP client should seedproxy use? CPU per request of bare pass-through
proxies (``bench/passthrough.py``: the same uvicorn app, differing only in the
client) in front of the benchmark's fake upstream, side by side in one run, at
concurrency 64, for whole answers and for streams (each chunk relayed as it comes).
Rounds are interleaved, so machine load hits every client alike;
the figure to read is each client's ratio to seedproxy's own (``LeanClient`` over
``FastTransport``). The load comes from ``bench/rawhttp.py`` connections.

    python bench/clients.py [--rounds 5] [--requests 4000]

aiohttp and pyreqwest are optional (``pip install aiohttp pyreqwest``); a client
that is not installed is skipped.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import overhead as ov  # noqa: E402
from rawhttp import RawConnection, build_request  # noqa: E402

BENCH = Path(__file__).resolve().parent
CLIENTS = {
    "seedproxy LeanClient": ("lean", None),
    "pyreqwest": ("pyreqwest", "pyreqwest"),
    "aiohttp": ("aiohttp", "aiohttp"),
    "httpx (stock pool)": ("httpx", None),
}
BODIES = {
    False: b'{"model":"m","messages":[{"role":"user","content":"hello there"}],'
    b'"max_tokens":32,"logprobs":true,"return_token_ids":true}',
    True: b'{"model":"m","messages":[{"role":"user","content":"hello there"}],'
    b'"max_tokens":32,"stream":true}',
}
CONCURRENCY = 64


def start(client: str, upstream: ov.Target, workdir: Path) -> ov.Target:
    port = ov.free_port()
    cmd = [sys.executable, str(BENCH / "passthrough.py"), "--client", client, "--port",
           str(port), "--upstream", f"http://127.0.0.1:{upstream.port}/v1/chat/completions"]
    log = open(workdir / f"{client}.log", "wb")  # noqa: SIM115 - lives as long as the process
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log)
    ov.wait_http(f"http://127.0.0.1:{port}/", proc, 30)
    return ov.Target(client, port, proc)


async def load(target: ov.Target, count: int, stream: bool) -> float:
    """CPU microseconds the target spent per request over ``count`` requests."""
    conns = [RawConnection("127.0.0.1", target.port) for _ in range(CONCURRENCY)]
    await asyncio.gather(*(c.open() for c in conns))
    data = build_request("127.0.0.1", target.port, "POST", "/", BODIES[stream], {})
    per_conn = count // CONCURRENCY

    async def drive(conn: RawConnection) -> None:
        for _ in range(per_conn):
            status, _, body = await conn.request(data)
            assert status == 200 and body.count(b"data:" if stream else b"{") >= 1, body[:80]

    assert target.proc is not None
    before = ov.cpu_seconds(target.proc.pid)
    await asyncio.gather(*(drive(c) for c in conns))
    spent = ov.cpu_seconds(target.proc.pid) - before
    for conn in conns:
        conn.close()
    return spent / (per_conn * CONCURRENCY) * 1e6


async def run(
    targets: dict[str, ov.Target], rounds: int, count: int
) -> dict[tuple[str, bool], list[float]]:
    for target in targets.values():
        for stream in (False, True):  # warm: connections open, code paths hot
            await load(target, CONCURRENCY * 4, stream)
    results: dict[tuple[str, bool], list[float]] = {}
    for _ in range(rounds):
        for stream in (False, True):
            for name, target in targets.items():
                results.setdefault((name, stream), []).append(
                    await load(target, count // 4 if stream else count, stream)
                )
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=4000)
    args = parser.parse_args()
    targets: dict[str, ov.Target] = {}
    with tempfile.TemporaryDirectory() as tmp:
        upstream = ov.start_upstream(Path(tmp), None)
        try:
            for name, (client, module) in CLIENTS.items():
                if module is not None and importlib.util.find_spec(module) is None:
                    print(f"skipping {name}: not installed", file=sys.stderr)
                    continue
                targets[name] = start(client, upstream, Path(tmp))
            results = asyncio.run(run(targets, args.rounds, args.requests))
        finally:
            for target in targets.values():
                ov.stop(target.proc)
            ov.stop(upstream.proc)
    print("| client | answer | proxy CPU per request (µs), median | range | ratio |")
    print("|---|---|---|---|---|")
    for (name, stream), values in results.items():
        base = statistics.median(results[("seedproxy LeanClient", stream)])
        median = statistics.median(values)
        spread = f"{min(values):.0f}–{max(values):.0f}"
        kind = "stream (34 chunks)" if stream else "whole"
        print(f"| {name} | {kind} | {median:.0f} | {spread} | {median / base:.2f}× |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
