"""Benchmark a warm start: ``seedproxy serve`` (embedded engine, cache already built) to
its first answered chat request, against ``python -c "import torch"`` in the same run.

Usage: python bench/warm_start.py [--runs 5] [--model PATH] [--against OTHER/src]

Each run starts ``python -m seedproxy serve --port P`` on a free port and, from the
moment the process is spawned, sends a chat request (``max_tokens`` 1) every 20 ms until
one is answered 200. The time to that answer covers the imports, loading the cached
weights and the first forward pass. A first start (the GGUF converted into the cache) is
made before the timed runs and reported apart. Each run of the baseline spawns
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


def time_first_answer(model: str | None, src: Path = SRC, timeout_s: float = 600.0) -> float:
    """Seconds from spawning ``serve`` to its first 200 answer to a chat request."""
    port = _free_port()
    args = [sys.executable, "-m", "seedproxy", "serve", "--port", str(port)]
    if model:
        args += ["--model", model]
    body = {"model": "default", "max_tokens": 1,
            "messages": [{"role": "user", "content": "Hi"}]}
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    t0 = time.perf_counter()
    proc = subprocess.Popen(args, env=_env(src), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        with httpx.Client(timeout=60.0) as client:
            while time.perf_counter() - t0 < timeout_s:
                if proc.poll() is not None:
                    raise RuntimeError(f"serve exited with {proc.returncode}")
                try:
                    if client.post(url, json=body).status_code == 200:
                        return time.perf_counter() - t0
                except httpx.TransportError:
                    pass
                time.sleep(0.02)  # polling interval of the measurement, not a synchronisation
        raise TimeoutError(f"no answer within {timeout_s} s")
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--model")
    parser.add_argument("--against", type=Path, help="another checkout's src, timed alike")
    args = parser.parse_args()
    first = time_first_answer(args.model)
    print(f"first start (cache built if missing): {first:.2f} s")
    starts, torch_s, other = [], [], []
    for _ in range(args.runs):
        torch_s.append(time_import_torch())
        starts.append(time_first_answer(args.model))
        if args.against:
            other.append(time_first_answer(args.model, args.against.resolve()))
    med_start, med_torch = statistics.median(starts), statistics.median(torch_s)
    if other:
        med_other = statistics.median(other)
        print(f"{args.against}: median {med_other:.2f} s, min {min(other):.2f} s; "
              f"this checkout is {med_other / med_start:.2f}x faster")
    print(f"warm start to first answer: median {med_start:.2f} s, min {min(starts):.2f} s "
          f"({', '.join(f'{s:.2f}' for s in starts)})")
    print(f'python -c "import torch":  median {med_torch:.2f} s, min {min(torch_s):.2f} s')
    print(f"ratio warm start / import torch: {med_start / med_torch:.2f}")


if __name__ == "__main__":
    main()
