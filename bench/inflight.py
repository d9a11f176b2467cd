"""Requests held in flight: ``--inflight`` streamed session requests (2,000 by
default) held open against an upstream that sends each answer's first chunk and then
holds the rest (``held_upstream.py``), through seedproxy and, in the same run,
LiteLLM proxy (skipped with a message where it cannot be installed or started).

    python bench/inflight.py [--inflight 2000] [--probes 200] [--no-litellm]

For each proxy: new sessions' p99 latency (``--probes`` sequential non-streamed
requests, each a new session) alone, then with every held request in flight (all of
them have their first chunk); the proxy's RSS per in-flight request (RSS with them
in flight, less RSS just before, over their number); then the upstream releases
them, and each must end with ``[DONE]`` (and, through seedproxy, be recorded).

File descriptors: each in-flight request holds two sockets in the proxy (its client's
and its upstream's), one in this process and one in the upstream, so every process
needs ``--inflight`` plus a margin of open files, the proxy twice that. This script
raises its soft ``RLIMIT_NOFILE`` to ``2 * inflight + 1024`` (capped at the hard
limit, which it reports and refuses to exceed); its children inherit it. Past a few
thousand, raise the hard limit first: ``ulimit -n 65536`` (or ``LimitNOFILE=`` under
systemd) lets one proxy hold about 32,000.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import overhead as ov  # noqa: E402
from held_upstream import HOLD_MODEL  # noqa: E402
from rawhttp import RawConnection, build_request  # noqa: E402

BENCH = Path(__file__).resolve().parent


def raise_open_files(inflight: int) -> int:
    """Raise the soft open-file limit for ``inflight`` requests (see the module)."""
    needed = 2 * inflight + 1024
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and needed > hard:
        raise SystemExit(f"{inflight} in flight needs {needed} open files; the hard limit is "
                         f"{hard}: raise it (ulimit -n {needed}) or hold fewer")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, needed), hard))
    return max(soft, needed)


def _body(model: str, stream: bool) -> bytes:
    return json.dumps({"model": model, "stream": stream, "max_tokens": 32,
                       "messages": [{"role": "user", "content": "Hold on."}]}).encode()


def _path(target: ov.Target, session: str) -> str:
    return f"/sessions/{session}/v1/chat/completions" if target.sessions \
        else "/v1/chat/completions"


async def probes(target: ov.Target, count: int, tag: str,
                 timeout_s: float = 60.0) -> list[float]:
    """``count`` sequential requests, each a new session; their latencies. One that
    does not answer within ``timeout_s`` ends the series (TimeoutError)."""
    conn = await RawConnection("127.0.0.1", target.port).open()
    out = []
    try:
        for i in range(count):
            data = build_request("127.0.0.1", target.port, "POST",
                                 _path(target, f"probe-{tag}-{i}"),
                                 _body(ov.MODEL, False), target.headers)
            started = time.perf_counter()
            status, _, _ = await asyncio.wait_for(conn.request(data), timeout_s)
            out.append(time.perf_counter() - started)
            if status != 200:
                raise RuntimeError(f"{target.name}: a probe got {status}")
    finally:
        conn.close()
    return out


Held = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def hold_one(target: ov.Target, index: int, gate: asyncio.Semaphore) -> Held:
    """One streamed request, returned once its first chunk has arrived."""
    async with gate:
        reader, writer = await asyncio.open_connection("127.0.0.1", target.port)
        writer.write(build_request("127.0.0.1", target.port, "POST",
                                   _path(target, f"held-{index}"),
                                   _body(HOLD_MODEL, True), target.headers))
        seen = b""
        while b"data:" not in seen:
            chunk = await reader.read(65536)
            if not chunk:
                raise RuntimeError(f"{target.name}: held request {index} closed: {seen[:300]!r}")
            seen += chunk
        if not seen.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(f"{target.name}: held request {index}: {seen[:300]!r}")
        return reader, writer


async def finish(held: Held) -> bool:
    """Read a released stream to its end; whether it ended with ``[DONE]``."""
    reader, writer = held
    seen = b""
    while b"data: [DONE]" not in seen:
        chunk = await reader.read(65536)
        if not chunk:
            break
        seen = seen[-64:] + chunk
    writer.close()
    return b"data: [DONE]" in seen


def recorded(target: ov.Target, count: int) -> int:
    """How many held sessions have their one interaction recorded, status 200."""
    found = 0
    with httpx.Client(base_url=f"http://127.0.0.1:{target.port}", timeout=60) as client:
        for i in range(count):
            body = client.get(f"/sessions/held-{i}/trajectory").json()
            found += [x.get("status", 200) for x in body["interactions"]] == [200]
    return found


async def measure(target: ov.Target, upstream: ov.Target, inflight: int,
                  count: int, ramp_timeout_s: float = 300.0) -> dict[str, float]:
    await probes(target, 50, "warm")
    alone = await probes(target, count, "alone")
    assert target.proc is not None
    idle = ov.rss_bytes(target.proc.pid)
    gate = asyncio.Semaphore(256)  # connecting, not holding: all stay open
    started = time.perf_counter()
    tries = await asyncio.gather(*(asyncio.wait_for(hold_one(target, i, gate), ramp_timeout_s)
                                   for i in range(inflight)), return_exceptions=True)
    ramp_s = time.perf_counter() - started
    held = [t for t in tries if isinstance(t, tuple)]
    failed = [t for t in tries if not isinstance(t, tuple)]
    if failed:  # a proxy that queues or refuses past some number: said, not hidden
        print(f"{target.name}: {len(failed)} of {inflight} never got their first chunk "
              f"({type(failed[0]).__name__}: {failed[0]})", flush=True)
    loaded = ov.rss_bytes(target.proc.pid)
    try:
        under = await probes(target, count, "loaded")
    except TimeoutError:  # queued behind the held requests: said, not hidden
        print(f"{target.name}: a new session's request did not answer within 60 s with "
              f"{len(held)} in flight", flush=True)
        under = [float("inf")]
    httpx.post(f"http://127.0.0.1:{upstream.port}/release", timeout=30).raise_for_status()
    done = sum(await asyncio.gather(*(finish(h) for h in held)))
    httpx.post(f"http://127.0.0.1:{upstream.port}/reset", timeout=30).raise_for_status()
    figures = {
        "inflight": len(held), "completed": done, "ramp_s": ramp_s,
        "rss_idle_mib": idle / 2**20, "rss_loaded_mib": loaded / 2**20,
        "kib_per_request": (loaded - idle) / max(1, len(held)) / 1024,
        "p99_alone_ms": ov.pct(alone, 0.99) * 1e3, "p99_loaded_ms": ov.pct(under, 0.99) * 1e3,
    }
    if target.sessions:
        figures["recorded"] = recorded(target, inflight)
    return figures


def start_upstream(workdir: Path) -> ov.Target:
    port = ov.free_port()
    proc = subprocess.Popen([sys.executable, str(BENCH / "held_upstream.py"), "--port",
                             str(port)], stdout=subprocess.DEVNULL,
                            stderr=open(workdir / "upstream.log", "wb"))  # noqa: SIM115
    ov.wait_http(f"http://127.0.0.1:{port}/health", proc, 30)
    return ov.Target("upstream", port, proc)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--inflight", type=int, default=2000)
    parser.add_argument("--probes", type=int, default=200)
    parser.add_argument("--no-litellm", action="store_true")
    parser.add_argument("--no-seedproxy", action="store_true")
    parser.add_argument("--ramp-timeout-s", type=float, default=120.0,
                        help="a request without its first chunk by then is not in flight")
    args = parser.parse_args()
    limit = raise_open_files(args.inflight)
    print(f"open-file limit {limit} ({args.inflight} in flight: 2 per request in the proxy)")
    workdir = Path(tempfile.mkdtemp(prefix="seedproxy-inflight-"))
    targets: list[ov.Target] = []
    rows: dict[str, dict[str, float]] = {}
    with ov.processes(targets):
        upstream = start_upstream(workdir)
        targets.append(upstream)
        if not args.no_seedproxy:
            room = ["--max-upstream-connections", str(args.inflight + 256)]
            proxy = ov.start_seedproxy(upstream, workdir, room, None)
            targets.append(proxy)
            rows["seedproxy"] = asyncio.run(measure(proxy, upstream, args.inflight,
                                                      args.probes, args.ramp_timeout_s))
            print(json.dumps(rows["seedproxy"]), flush=True)
            ov.stop(proxy.proc)
        litellm = None if args.no_litellm else ov.start_litellm(
            upstream, workdir, None, (ov.MODEL, HOLD_MODEL))
        if litellm is not None:
            targets.append(litellm)
            rows["litellm"] = asyncio.run(measure(litellm, upstream, args.inflight,
                                                    args.probes, args.ramp_timeout_s))
    print(json.dumps(rows, indent=1))
    print("| proxy | held | completed | RSS per in-flight request (KiB) | new-session p99 "
          "alone (ms) | p99 with them in flight (ms) | ratio |")
    print("|---|---|---|---|---|---|---|")
    for name, r in rows.items():
        print(f"| {name} | {r['inflight']:,.0f} | {r['completed']:,.0f} | "
              f"{r['kib_per_request']:.1f} | {r['p99_alone_ms']:.2f} | "
              f"{r['p99_loaded_ms']:.2f} | x{r['p99_loaded_ms'] / r['p99_alone_ms']:.2f} |")
    if {"litellm", "seedproxy"} <= rows.keys():
        s, lt = rows["seedproxy"], rows["litellm"]
        print(f"LiteLLM / seedproxy: RSS per in-flight request "
              f"x{lt['kib_per_request'] / s['kib_per_request']:.2f}, p99 with them in flight "
              f"x{lt['p99_loaded_ms'] / s['p99_loaded_ms']:.2f}")
    return 0


if __name__ == "__main__":
    with contextlib.suppress(ImportError):
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    sys.exit(main())
