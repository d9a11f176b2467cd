"""Benchmark a warm start: ``seedproxy serve`` (embedded engine, cache already built) to
its first answered chat request, against ``python -c "import torch"`` in the same run.

Usage: python bench/warm_start.py [--runs 5] [--model PATH] [--against OTHER/src]

Each run starts ``python -m seedproxy serve --port P`` on a free port and, from the
moment the process is spawned, asks ``/healthz`` every 20 ms until it answers 200 (the
port listens: before the engine has loaded), then sends a chat request (``max_tokens``
1), which waits for the engine, until one is answered 200. The time to that answer
covers the imports, loading the cached weights and the first forward pass. A first
start (the GGUF converted into the cache) is made before the timed runs and reported
apart. Each run of the baseline spawns
``python -c "import torch"`` and waits for it to exit. Both are reported as absolute
seconds (median and min over the runs) and as the ratio of their medians. With
``--against``, another checkout's ``src`` (an older version) is timed the same way in
the same runs, interleaved, and reported as a ratio too.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

SRC = Path(__file__).resolve().parents[1] / "src"


def _env(src: Path = SRC) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEEDPROXY_")}
    if "SEEDPROXY_CACHE_DIR" in os.environ:
        env["SEEDPROXY_CACHE_DIR"] = os.environ["SEEDPROXY_CACHE_DIR"]
    env["PYTHONPATH"] = os.pathsep.join([str(src), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def time_import_torch() -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch"], check=True, env=_env())
    return time.perf_counter() - t0


def time_first_answer(model: str | None, src: Path = SRC, timeout_s: float = 600.0
                      ) -> tuple[float, float]:
    """Seconds from spawning ``serve`` to its first ``/healthz`` 200, and to its first
    200 answer to a chat request."""
    port = _free_port()
    args = [sys.executable, "-m", "seedproxy", "serve", "--port", str(port)]
    if model:
        args += ["--model", model]
    body = {"model": "default", "max_tokens": 1,
            "messages": [{"role": "user", "content": "Hi"}]}
    root = f"http://127.0.0.1:{port}"
    t0 = time.perf_counter()
    proc = subprocess.Popen(args, env=_env(src), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    healthy: float | None = None
    try:
        with httpx.Client(timeout=60.0) as client:
            while time.perf_counter() - t0 < timeout_s:
                if proc.poll() is not None:
                    raise RuntimeError(f"serve exited with {proc.returncode}")
                try:
                    if healthy is None:
                        if client.get(f"{root}/healthz").status_code == 200:
                            healthy = time.perf_counter() - t0
                            continue
                    elif client.post(f"{root}/v1/chat/completions",
                                     json=body).status_code == 200:
                        return healthy, time.perf_counter() - t0
                except httpx.TransportError:
                    pass
                time.sleep(0.02)  # polling interval of the measurement, not a synchronisation
        raise TimeoutError(f"no answer within {timeout_s} s")
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def _summary(label: str, runs: list[float]) -> str:
    return (f"{label}: median {statistics.median(runs):.2f} s, min {min(runs):.2f} s "
            f"({', '.join(f'{s:.2f}' for s in runs)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--model")
    parser.add_argument("--against", type=Path, help="another checkout's src, timed alike")
    args = parser.parse_args()
    first = time_first_answer(args.model)[1]
    print(f"first start (cache built if missing): {first:.2f} s")
    starts, health, torch_s, other, other_health = [], [], [], [], []
    for _ in range(args.runs):
        torch_s.append(time_import_torch())
        up, answered = time_first_answer(args.model)
        health.append(up)
        starts.append(answered)
        if args.against:
            up, answered = time_first_answer(args.model, args.against.resolve())
            other_health.append(up)
            other.append(answered)
    med_start, med_torch = statistics.median(starts), statistics.median(torch_s)
    if other:
        print(_summary(f"{args.against}: /healthz 200", other_health))
        print(_summary(f"{args.against}: first answer", other))
        print(f"this checkout's first answer is {statistics.median(other) / med_start:.2f}x "
              "faster")
    print(_summary("warm start to /healthz 200", health))
    print(_summary("warm start to first answer", starts))
    print(_summary('python -c "import torch"', torch_s))
    print(f"ratio warm start / import torch: {med_start / med_torch:.2f}")


if __name__ == "__main__":
    main()
