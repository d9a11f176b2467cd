"""Compare seedproxy at several git revisions, interleaved in one run, against the
benchmark's fake upstream: proxy CPU per request (sequential, and at concurrency
``--concurrency``, 64 by default), sequential p50, streaming TTFB and requests per
second at that concurrency.

    python bench/compare.py REV [REV...] [--rounds 4] [--seq 300] [--concurrency 64]
    python bench/compare.py REV [REV...] --tito [--rounds 4] [--concurrency 64]

With ``--tito`` every revision renders the chat template itself (``bench/tito.py``'s
flags, fake ``/generate`` upstream and 5-turn conversations): proxy CPU per request with
one conversation at a time, and with ``--concurrency`` conversations at once.

Each revision's ``src/`` is exported with ``git archive`` to a temporary folder;
the working tree is used for the revision ``WORKTREE``. This is how the effect of
each optimisation in docs/performance.md was measured.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import overhead as ov  # noqa: E402
import tito  # noqa: E402


def export(rev: str, into: Path) -> Path:
    if rev == "WORKTREE":
        return ov.ROOT / "src"
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ov.ROOT), "archive", rev, "src"], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into / "src"


def start(src: Path, upstream: ov.Target, workdir: Path, name: str,
          extra: tuple[str, ...] = (), environ: dict[str, str] | None = None) -> ov.Target:
    """``serve`` from ``src`` with flags ``extra`` and variables ``environ`` added."""
    port = ov.free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEEDPROXY_")}
    env["PYTHONPATH"] = str(src)
    env.update(environ or {})
    cmd = [sys.executable, "-m", "seedproxy", "serve", "--upstream",
           f"http://127.0.0.1:{upstream.port}", "--port", str(port), *extra]
    log = open(workdir / f"{name}.log", "wb")  # noqa: SIM115 - lives as long as the process
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=log)
    ov.wait_http(f"http://127.0.0.1:{port}/healthz", proc, 60)
    return ov.Target(name, port, proc, sessions=True)


async def one_round(targets: list[ov.Target], results: dict[str, dict[str, list[float]]],
                    warm: bool, seq: int = 300, concurrency: int = 64) -> None:
    for t in targets:
        t.runs += 1
        cpu0 = ov.cpu_seconds(t.proc.pid)  # type: ignore[union-attr]
        lat, _, _ = await ov.sequential(t, seq, stream=False)
        cpu = ov.cpu_seconds(t.proc.pid) - cpu0  # type: ignore[union-attr]
        if not warm:
            results[t.name]["cpu_us"].append(cpu / seq * 1e6)
            results[t.name]["p50_ms"].append(ov.pct(lat, 0.5) * 1e3)
    for t in targets:
        t.runs += 1
        _, ttfb, _ = await ov.sequential(t, 30, stream=True)
        if not warm:
            results[t.name]["ttfb_ms"].append(ov.pct(ttfb, 0.5) * 1e3)
    for t in targets:
        t.runs += 1
        cpu0, served0 = ov.cpu_seconds(t.proc.pid), t.served  # type: ignore[union-attr]
        rps, _ = await ov.throughput(t, concurrency, 1.5)
        cpu = ov.cpu_seconds(t.proc.pid) - cpu0  # type: ignore[union-attr]
        if not warm:
            results[t.name]["rps"].append(rps)
            results[t.name]["cpu_us_c"].append(cpu / max(1, t.served - served0) * 1e6)


async def tito_rounds(targets: list[ov.Target], results: dict[str, dict[str, list[float]]],
                      rounds: int, concurrency: int = 64) -> None:
    """A warm-up round, then ``rounds`` of TITO conversations: one at a time, then
    ``concurrency`` at once. Each target has a client of its own for the whole run, so
    none inherits (or evicts) another's connections."""
    clients = {t.name: httpx.AsyncClient(timeout=120, limits=httpx.Limits(
        max_connections=concurrency)) for t in targets}
    try:
        for n in range(rounds + 1):
            for width, key in ((1, "cpu_us"), (concurrency, "cpu_us_c")):
                for t in targets:
                    t.runs += 1
                    cpu_s, count, elapsed = await _conversations(
                        clients[t.name], t, f"r{t.runs}", width)
                    if n > 0:
                        results[t.name][key].append(cpu_s / count * 1e6)
                        if width > 1:
                            results[t.name]["rps"].append(count / elapsed)
    finally:
        for client in clients.values():
            await client.aclose()


async def _conversations(client: httpx.AsyncClient, t: ov.Target, name: str,
                         width: int) -> tuple[float, int, float]:
    """8 conversations one after another (``width`` 1), or ``width`` at once: the
    proxy's CPU seconds, the requests made and the seconds they took."""
    base = f"http://127.0.0.1:{t.port}/sessions/{name}"
    cpu0 = ov.cpu_seconds(t.proc.pid)  # type: ignore[union-attr]
    started = time.perf_counter()
    if width == 1:
        counts = [await _conversation(client, f"{base}-{c}") for c in range(8)]
    else:
        counts = await asyncio.gather(*(
            _conversation(client, f"{base}-{c}") for c in range(width)))
    elapsed = time.perf_counter() - started
    return ov.cpu_seconds(t.proc.pid) - cpu0, sum(counts), elapsed  # type: ignore[union-attr]


async def _conversation(client: httpx.AsyncClient, session: str) -> int:
    """``tito.py``'s 5-turn conversation, on ``session``'s URL; the turns it made."""
    messages: list[dict[str, object]] = [{"role": "system", "content": "You are an agent."},
                                         {"role": "user", "content": "Start."}]
    for turn in range(5):
        reply = await client.post(f"{session}/v1/chat/completions",
                                  json={"model": "m", "messages": messages, "max_tokens": 64})
        reply.raise_for_status()
        messages.append(reply.json()["choices"][0]["message"])
        messages.append({"role": "user", "content": f"Next step {turn}."})
    return 5


def tito_upstream(workdir: Path) -> ov.Target:
    """``bench/tito.py``'s fake upstream (``/generate`` and chat), in its own process."""
    port = ov.free_port()
    log = open(workdir / "upstream.log", "wb")  # noqa: SIM115 - lives as long as the process
    proc = subprocess.Popen([sys.executable, str(Path(tito.__file__)), "--upstream-only",
                             str(port)], env={**os.environ, "PYTHONPATH": str(ov.ROOT / "src")},
                            stdout=subprocess.DEVNULL, stderr=log)
    ov.wait_http(f"http://127.0.0.1:{port}/get_server_info", proc, 120)
    return ov.Target("upstream", port, proc)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("revs", nargs="+")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seq", type=int, default=300,
                        help="sequential requests per round (CPU time is read in 10 ms ticks)")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--tito", action="store_true",
                        help="token-in-token-out conversations (bench/tito.py's)")
    args = parser.parse_args()
    with contextlib.suppress(ImportError):
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    workdir = Path(tempfile.mkdtemp(prefix="seedproxy-compare-"))
    targets: list[ov.Target] = []
    with ov.processes(targets):
        upstream = tito_upstream(workdir) if args.tito else ov.start_upstream(workdir, None)
        targets.append(upstream)
        extra = tuple(tito.flags()) if args.tito else ()
        proxies: list[ov.Target] = []
        for i, rev in enumerate(args.revs):  # each one stopped on exit, even if a later one fails
            proxies.append(start(export(rev, workdir / f"rev{i}"), upstream, workdir, rev,
                                 extra, {"SEEDPROXY_LOG_REQUESTS": "false"} if args.tito else {}))
            targets.append(proxies[-1])
        results: dict[str, dict[str, list[float]]] = {
            p.name: {"cpu_us": [], "cpu_us_c": [], "p50_ms": [], "ttfb_ms": [], "rps": []}
            for p in proxies}
        if args.tito:
            asyncio.run(tito_rounds(proxies, results, args.rounds, args.concurrency))
        else:
            for warm in [True] + [False] * args.rounds:
                asyncio.run(one_round(proxies, results, warm=warm, seq=args.seq,
                                      concurrency=args.concurrency))
    c = args.concurrency
    print(f"| revision | proxy CPU/request (us) | CPU/request c={c} (us) | seq p50 (ms) "
          f"| stream TTFB p50 (ms) | req/s c={c} |")
    print("|---|---|---|---|---|---|")
    base = None
    for name, figures in results.items():
        m = {k: statistics.median(v) if v else float("nan") for k, v in figures.items()}
        base = base or m
        ratio = m["cpu_us_c"] / base["cpu_us_c"] if base["cpu_us_c"] else float("nan")
        print(f"| {name} | {m['cpu_us']:,.0f} | {m['cpu_us_c']:,.0f} (x{ratio:.2f}) | "
              f"{m['p50_ms']:.3f} | {m['ttfb_ms']:.3f} | {m['rps']:,.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
