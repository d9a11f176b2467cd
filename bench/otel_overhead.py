"""What tracing costs: seedproxy before tracing existed (``--before``, a git revision),
this checkout with tracing off (the default), and this checkout with ``--otel``
exporting every span by OTLP/HTTP to a sink on loopback, interleaved in one run
against the benchmark's fake upstream (``compare.py``'s rounds: proxy CPU per
request sequential and at concurrency, p50, stream TTFB, requests per second).

    python bench/otel_overhead.py [--before 20cc968] [--rounds 4] [--seq 300]

The sink is an in-process HTTP server answering every export 200 (it decodes
nothing), so the proxy's figures include building, batching and sending the spans.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import tempfile
import threading
import timeit
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
import compare  # noqa: E402
import overhead as ov  # noqa: E402


class _Sink(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["content-length"]))
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


def seam_ns(loops: int = 2_000) -> float:
    """Nanoseconds of the no-op tracer's calls that one session request makes (the
    same calls, in order, as ``admission``, ``seating`` and ``exchange`` make)."""
    from seedproxy.pipeline.tracing import NO_TRACER

    headers: dict[str, str] = {}
    upstream: dict[str, str] = {}

    def one_request() -> None:
        trace = NO_TRACER.start("/v1/chat/completions", headers)
        admitting = trace.child("admission")
        with trace.child("store.view"):
            pass
        with trace.child("store.allocate"):
            pass
        admitting.end()
        span = trace.child("upstream")
        span.inject(upstream)
        span.set("seedproxy.upstream", "u")
        span.end()
        with trace.child("record"):
            pass
        trace.end(200, dict)
        admitting.end()
        trace.end(500)

    return min(timeit.repeat(one_request, number=loops, repeat=200)) / loops * 1e9


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", default="20cc968",
                        help="the revision before tracing (default: 20cc968)")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seq", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=64)
    args = parser.parse_args()
    sink = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    threading.Thread(target=sink.serve_forever, daemon=True).start()
    otlp = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{sink.server_address[1]}"}
    workdir = Path(tempfile.mkdtemp(prefix="seedproxy-otel-"))
    targets: list[ov.Target] = []
    with ov.processes(targets):
        upstream = ov.start_upstream(workdir, None)
        targets.append(upstream)
        here = compare.export("WORKTREE", workdir)
        proxies = [
            compare.start(compare.export(args.before, workdir / "before"), upstream, workdir,
                          f"before ({args.before})"),
            compare.start(here, upstream, workdir, "tracing off"),
            compare.start(here, upstream, workdir, "--otel", ("--otel",), otlp),
        ]
        targets.extend(proxies)
        results: dict[str, dict[str, list[float]]] = {
            p.name: {"cpu_us": [], "cpu_us_c": [], "p50_ms": [], "ttfb_ms": [], "rps": []}
            for p in proxies}
        asyncio.run(compare.one_round(proxies, results, warm=True,
                                      concurrency=args.concurrency))
        for _ in range(args.rounds):
            asyncio.run(compare.one_round(proxies, results, warm=False, seq=args.seq,
                                          concurrency=args.concurrency))
    sink.shutdown()
    print(f"the no-op tracer's calls per request (timeit, in process): {seam_ns():.0f} ns")
    c = args.concurrency
    print(f"| proxy | CPU/request (us) | CPU/request c={c} (us) | seq p50 (ms) "
          f"| stream TTFB p50 (ms) | req/s c={c} |")
    print("|---|---|---|---|---|---|")
    base: dict[str, float] | None = None
    for name, figures in results.items():
        m = {k: statistics.median(v) for k, v in figures.items()}
        base = base or m
        print(f"| {name} | {m['cpu_us']:,.0f} (x{m['cpu_us'] / base['cpu_us']:.3f}) "
              f"| {m['cpu_us_c']:,.0f} (x{m['cpu_us_c'] / base['cpu_us_c']:.3f}) "
              f"| {m['p50_ms']:.3f} (x{m['p50_ms'] / base['p50_ms']:.3f}) "
              f"| {m['ttfb_ms']:.3f} | {m['rps']:,.0f} (x{m['rps'] / base['rps']:.3f}) |")
    return 0


if __name__ == "__main__":
    with contextlib.suppress(ImportError):
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    sys.exit(main())
