"""How long a large body stops the proxy's event loop: the longest ``GET /healthz``
while one large request is served, with large bodies parsed in a worker process
(``--offload-parse-bytes``, 1 MiB by default) against all parsed in the loop (the
threshold set past any body: the path before offloading), in the same run.

Two requests, each sent while another thread sends ``/healthz`` back to back (and
records each latency), then once more alone, for its own time:

- answer: a session's chat request whose upstream answer echoes ``--ids`` prompt ids
  (7.8M, what a 30 MB prompt echoes: a 48.9 MB answer, read, checked and recorded);
- body: a chat request (outside a session) whose body is a 30 MB message.

The proxy and the fake upstream (``bench/fake_upstream.py``, ``BENCH_PROMPT_IDS``) are
their own processes; ``--rounds`` of each request per mode, interleaved.

    python bench/parse_stall.py [--ids 7800000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import orjson

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from overhead import free_port, stop, wait_http  # noqa: E402

INFINITE = 10**15
"""An ``--offload-parse-bytes`` past any body: every body parsed in the loop."""
BODY_BYTES = 30 * 1024 * 1024


def start(cmd: list[str], env: dict[str, str], log: Path, ready: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=open(log, "wb"))
    wait_http(ready, proc, 120)
    return proc


def probe(url: str, done: threading.Event, out: list[float]) -> None:
    """``/healthz`` back to back until ``done``: each latency in seconds."""
    with httpx.Client(timeout=120) as http:
        while not done.is_set():
            started = time.perf_counter()
            http.get(url).raise_for_status()
            out.append(time.perf_counter() - started)


def timed(send: Any) -> float:
    started = time.perf_counter()
    send()
    return time.perf_counter() - started


def stalled(base: str, send: Any) -> tuple[float, float, int]:
    """(the longest /healthz, the request's time alone, /healthz answered) for ``send``:
    once beside the prober, then once alone (the prober's load slows the request)."""
    done = threading.Event()
    latencies: list[float] = []
    prober = threading.Thread(target=probe, args=(f"{base}/healthz", done, latencies))
    prober.start()
    while not latencies:  # the prober is connected and answered once
        time.sleep(0.01)
    send()
    done.set()
    prober.join()
    return max(latencies), timed(send), len(latencies)


def small_latencies(bases: dict[str, str], count: int) -> dict[str, list[float]]:
    """Milliseconds of ``count`` small capturing chat requests per proxy, one after
    another, the proxies taking turns (so load from elsewhere falls on both alike)."""
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    out: dict[str, list[float]] = {mode: [] for mode in bases}
    clients = {mode: httpx.Client(base_url=base, timeout=60) for mode, base in bases.items()}
    try:
        for i in range(count):
            for mode, http in clients.items():
                started = time.perf_counter()
                http.post(f"/sessions/small-{i}/v1/chat/completions",
                          json=body).raise_for_status()
                out[mode].append((time.perf_counter() - started) * 1000)
    finally:
        for http in clients.values():
            http.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ids", type=int, default=7_800_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--small", type=int, default=1000,
                        help="small requests per mode (their latency, p50 and p99)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="parse-stall-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEEDPROXY_")}
    env["PYTHONPATH"] = str(BENCH.parent / "src")
    up_port = free_port()
    upstream = start([sys.executable, str(BENCH / "fake_upstream.py"), "--port", str(up_port)],
                     {**env, "BENCH_PROMPT_IDS": str(args.ids)}, work / "upstream.log",
                     f"http://127.0.0.1:{up_port}/health")
    proxies: dict[str, tuple[str, subprocess.Popen[bytes]]] = {}
    try:
        for mode, threshold in (("in loop", INFINITE), ("offloaded", 1024 * 1024)):
            port = free_port()
            proc = start([sys.executable, "-m", "seedproxy", "serve", "--port", str(port),
                          "--upstream", f"http://127.0.0.1:{up_port}", "--no-log-requests",
                          "--offload-parse-bytes", str(threshold),
                          "--max-upstream-body-bytes", str(256 * 1024 * 1024),
                          "--max-body-bytes", str(64 * 1024 * 1024)],
                         env, work / f"proxy-{mode}.log", f"http://127.0.0.1:{port}/healthz")
            proxies[mode] = (f"http://127.0.0.1:{port}", proc)
        large = orjson.dumps({"model": "m", "messages": [
            {"role": "user", "content": "word " * (BODY_BYTES // 5)}]})
        json_type = {"content-type": "application/json"}
        small = {"role": "user", "content": "hi"}
        results: dict[tuple[str, str], list[tuple[float, float, int]]] = {}
        turns = itertools.count()
        for round_ in range(args.rounds + 1):  # round 0 warms up (the worker pool starts)
            for mode, (base, _) in proxies.items():
                with httpx.Client(base_url=base, timeout=600) as http:
                    def answer(http: httpx.Client = http) -> None:
                        # a new session each time: a first turn, no known prefix to skip
                        reply = http.post(f"/sessions/stall-{next(turns)}/v1/chat/completions",
                                          json={"model": "m", "messages": [small],
                                                "bench_large_echo": True})
                        reply.raise_for_status()

                    def body(http: httpx.Client = http) -> None:
                        http.post("/v1/chat/completions", content=large,
                                  headers=json_type).raise_for_status()

                    for name, send in (("answer", answer), ("body", body)):
                        measured = stalled(base, send)
                        if round_:
                            results.setdefault((name, mode), []).append(measured)
        print(f"{args.ids} echoed ids; a {BODY_BYTES / 2**20:.0f} MiB body; "
              f"median of {args.rounds} rounds")
        for name in ("answer", "body"):
            row = {mode: results[(name, mode)] for mode in proxies}
            stall = {m: statistics.median(r[0] for r in rows) for m, rows in row.items()}
            took = {m: statistics.median(r[1] for r in rows) for m, rows in row.items()}
            probes = {m: statistics.median(r[2] for r in rows) for m, rows in row.items()}
            print(f"{name:6}  longest /healthz: in loop {stall['in loop']:.3f} s, offloaded "
                  f"{stall['offloaded']:.3f} s ({stall['offloaded'] / stall['in loop']:.3f}x); "
                  f"request alone: {took['in loop']:.2f} s vs {took['offloaded']:.2f} s "
                  f"({took['offloaded'] / took['in loop']:.2f}x); /healthz answered "
                  f"{probes['in loop']:.0f} vs {probes['offloaded']:.0f} times")
        small_ms = small_latencies({mode: base for mode, (base, _) in proxies.items()},
                                   args.small)
        for label, q in (("p50", 0.5), ("p99", 0.99)):
            at = {m: sorted(v)[int(q * (len(v) - 1))] for m, v in small_ms.items()}
            print(f"small request {label}: in loop {at['in loop']:.3f} ms, offloaded "
                  f"{at['offloaded']:.3f} ms ({at['offloaded'] / at['in loop']:.2f}x)")
    finally:
        for _, proc in proxies.values():
            stop(proc)
        stop(upstream)


if __name__ == "__main__":
    main()
