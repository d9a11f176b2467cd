"""Reads at scale: does a page of ``GET /sessions`` (and an unnamed export with nothing
to export) cost the same with 100k stored sessions as with 1k? In every store.

The store is filled through its own API (sessions created, ended and exported, then
one left open), the proxy runs under uvicorn in a thread of this process, and the
client (plain httpx, in the main thread) asks for a page of 100 sessions and for an
export that finds nothing. The proxy's CPU per request is the process's CPU less the
main thread's (so the client is not counted; a Redis server's own CPU is not either).
The figure to read is the ratio of 100k to 1k, measured in the same run.

    python bench/sessions_scale.py [--sizes 1000,100000] [--requests 50]
                                   [--stores memory,sqlite,redis]

Redis needs ``redis-server`` on the PATH (it is started on a free port); SQLite's
file lies in /dev/shm when there is one, so filling 100k sessions is quick.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import uvicorn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from seedproxy.proxy import create_app  # noqa: E402
from seedproxy.sessions import SessionRecord, SessionStore, open_store  # noqa: E402
from seedproxy.settings import Settings  # noqa: E402

FILL_CONCURRENCY = 8


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def fill(store: SessionStore, start: int, stop: int) -> None:
    """Sessions ``start``..``stop - 1``: created, ended and exported."""
    async def one(k: int) -> None:
        sid = f"s{k:07d}"
        await store.create(SessionRecord(sid, sid, f"key-{sid}", f"g{k // 8}"))
        await store.end(sid)

    sem = asyncio.Semaphore(FILL_CONCURRENCY)

    async def bounded(k: int) -> None:
        async with sem:
            await one(k)

    for base in range(start, stop, 1024):
        top = min(stop, base + 1024)

        await asyncio.gather(*(bounded(k) for k in range(base, top)))
        await store.mark_exported([f"s{k:07d}" for k in range(base, top)])


class Server:
    def __init__(self, app: Any) -> None:
        config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning")
        self.server = uvicorn.Server(config)
        self.server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        while not self.server.started:
            time.sleep(0.01)
        self.url = f"http://127.0.0.1:{self.server.servers[0].sockets[0].getsockname()[1]}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


def measure(url: str, requests: int) -> dict[str, tuple[float, float]]:
    """(proxy CPU ms, wall ms) per request, for a page and for an empty export."""
    calls = {
        "page": lambda c: c.get("/sessions", params={"limit": 100}),
        "export": lambda c: c.post("/trajectories/export", json={}),
    }
    out = {}
    with httpx.Client(base_url=url, timeout=600) as client:
        for name, call in calls.items():
            for _ in range(10):  # warm up
                call(client).raise_for_status()
            cpu0, mine0, wall0 = time.process_time(), time.thread_time(), time.perf_counter()
            for _ in range(requests):
                answer = call(client)
                answer.raise_for_status()
            cpu = (time.process_time() - cpu0) - (time.thread_time() - mine0)
            wall = time.perf_counter() - wall0
            out[name] = (1000 * cpu / requests, 1000 * wall / requests)
            if name == "export":
                assert answer.json()["trajectories"] == [], answer.text[:200]
    return out


def run_store(kind: str, sizes: list[int], requests: int, workdir: Path,
              redis_url: str | None) -> dict[int, dict[str, tuple[float, float]]]:
    results = {}
    if kind == "memory":
        url = "memory://"
    elif kind == "sqlite":
        url = f"sqlite:///{workdir / 'scale.db'}"
    else:
        assert redis_url is not None
        url = f"{redis_url}/0?prefix=scale{os.getpid()}:"
    shared = open_store(url) if kind != "redis" else None
    filled = 0
    for size in sizes:
        t0 = time.perf_counter()
        if shared is not None:
            asyncio.run(fill(shared, filled, size))
        else:
            async def fill_redis(lo: int = filled, hi: int = size) -> None:
                # a patient handle: a loaded machine must not fail the fill
                handle = open_store(url.replace("?", "?timeout_s=600&"))
                await fill(handle, lo, hi)
                await handle.close()
            asyncio.run(fill_redis())
        filled = size
        print(f"  {kind}: {size} sessions stored in {time.perf_counter() - t0:.1f}s",
              file=sys.stderr)
        settings = Settings(upstream=["http://127.0.0.1:9"], store=url, session_ttl_s=None)
        app = create_app(settings, store=shared) if shared is not None else create_app(settings)
        server = Server(app)
        try:
            # one open session at the end: the export reads past none of the exported
            httpx.post(server.url + "/sessions", json={"session_id": f"open{size}"},
                       timeout=60).raise_for_status()
            results[size] = measure(server.url, requests)
            httpx.post(server.url + f"/sessions/open{size}/end", timeout=60).raise_for_status()
            httpx.post(server.url + "/trajectories/export", json={}, timeout=600)
        finally:
            server.stop()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,100000")
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--stores", default="memory,sqlite,redis")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    shm = Path("/dev/shm")
    workdir = Path(tempfile.mkdtemp(dir=shm if shm.is_dir() else None))
    redis_proc = None
    redis_url = None
    stores = args.stores.split(",")
    if "redis" in stores:
        binary = shutil.which("redis-server")
        if binary is None:
            print("redis-server not found: skipping Redis", file=sys.stderr)
            stores.remove("redis")
        else:
            port = free_port()
            redis_proc = subprocess.Popen(
                [binary, "--port", str(port), "--save", "", "--appendonly", "no"],
                stdout=subprocess.DEVNULL)
            redis_url = f"redis://127.0.0.1:{port}"
            deadline = time.monotonic() + 30
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
    small, large = sizes[0], sizes[-1]
    print(f"proxy CPU (wall) per request, ms; ratio = {large} / {small} sessions stored")
    print(f"| store | request | {small} | {large} | ratio (CPU) |")
    print("| --- | --- | --- | --- | --- |", flush=True)
    try:
        for kind in stores:
            by_size = run_store(kind, sizes, args.requests, workdir, redis_url)
            for name in ("page", "export"):
                a, b = by_size[small][name], by_size[large][name]
                print(f"| {kind} | {name} | {a[0]:.2f} ({a[1]:.2f}) | {b[0]:.2f} ({b[1]:.2f}) "
                      f"| {b[0] / a[0]:.2f} |", flush=True)
    finally:
        if redis_proc is not None:
            redis_proc.terminate()
            redis_proc.wait()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
