"""Resuming a crashed rollout: how long a rerun agent takes to reach its crash point
when the proxy answers it from the record, against the live run that recorded it,
measured in one run against the benchmark's fake upstream (streamed chat, 32 chunks
``--gap-ms`` apart, so each live turn waits on the upstream as a model would).

    python bench/resume.py [--turns 100] [--gap-ms 5] [--store memory://]

It prints the wall time of the live run and of the replayed rerun (and their ratio),
the time per turn as the agent sees it (request sent to last byte, p50) at the first
and last ten turns of each, and how many rerun turns were answered from the record.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import overhead as ov  # noqa: E402


def rollout(base: str, session: str, turns: int) -> tuple[float, list[float], int]:
    """(wall seconds, ms per turn, turns answered from the record)."""
    messages = [{"role": "system", "content": "You are a benchmark."}]
    per_turn: list[float] = []
    replayed = 0
    started = time.perf_counter()
    with httpx.Client(base_url=f"{base}/sessions/{session}/v1", timeout=60) as http:
        for turn in range(turns):
            messages.append({"role": "user", "content": f"Step {turn}: do the next thing."})
            body = {"model": ov.MODEL, "messages": messages, "max_tokens": 32, "stream": True}
            sent = time.perf_counter()
            with http.stream("POST", "/chat/completions", json=body) as answer:
                text = "".join(answer.iter_text())
            assert answer.status_code == 200, text
            per_turn.append((time.perf_counter() - sent) * 1000)
            replayed += answer.headers.get("x-seedproxy-replayed") == "true"
            messages.append({"role": "assistant", "content": f"reply {turn}"})
    return time.perf_counter() - started, per_turn, replayed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--gap-ms", type=float, default=5.0)
    parser.add_argument("--store", default="memory://")
    args = parser.parse_args()
    os.environ["BENCH_CHUNK_GAP_MS"] = str(args.gap_ms)
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        upstream = ov.start_upstream(workdir, None)
        proxy = ov.start_seedproxy(upstream, workdir, ["--store", args.store], None)
        base = f"http://127.0.0.1:{proxy.port}"
        try:
            httpx.post(f"{base}/sessions", json={"identity": "long"}).raise_for_status()
            live_s, live_ms, _ = rollout(base, "long", args.turns)
            made = httpx.post(f"{base}/sessions", json={"resume": "long"})
            made.raise_for_status()
            rerun = made.json()["sessions"][0]["session_id"]
            replay_s, replay_ms, replayed = rollout(base, rerun, args.turns)
        finally:
            ov.stop(proxy.proc)
            ov.stop(upstream.proc)
    p50 = statistics.median
    print(f"{args.turns} turns, streamed, upstream chunk gap {args.gap_ms} ms, {args.store}")
    print(f"live run      {live_s:8.3f} s   ms/turn p50: turns 1-10 "
          f"{p50(live_ms[:10]):.2f}, last 10 {p50(live_ms[-10:]):.2f}")
    print(f"resumed rerun {replay_s:8.3f} s   ms/turn p50: turns 1-10 "
          f"{p50(replay_ms[:10]):.2f}, last 10 {p50(replay_ms[-10:]):.2f}")
    print(f"rerun / live: {replay_s / live_s:.3f}; answered from the record: "
          f"{replayed}/{args.turns}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
