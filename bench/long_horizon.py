"""A long rollout's proxy time per turn and stored bytes, in every store and mode.

One rollout of ``--turns`` turns (200: about 55k tokens in token-in-token-out mode),
each turn a user message of ``--words`` words and ``max_tokens`` 32, through a proxy
in front of the fake SGLang (tests/helpers, in its own process, as a real server is: in
this process its parsing of each long request would hold the GIL the proxy is timed on;
``--fake-in-process`` measures it that way), for passthrough and token-in-token-out
(SmolLM2's tokenizer, the Qwen3-style test template) over the memory, SQLite and Redis
stores, all in one run. It prints the proxy's own time per turn
(``x-seedproxy-overhead-ms``, the mean over turns 1-10, 91-100 and 191-200, and the
last window's ratio to the first), the CPU its threads spent per turn (``cpu/turn``:
the process's CPU less the client thread's, which neither a loaded machine nor a slow
disk's fsync stretches) and the stored interaction bytes against the size
of the rollout's ``?style=concat`` export.

    python bench/long_horizon.py [--turns 200] [--words 60] [--stores memory,sqlite,redis]

It also prints the p50 and p99 latency of 8 other sessions' short requests, alone
(before the rollout) and beside 20 more turns of it (past the measured windows).

Goals (ratios within the run): last window / first window <= 2, stored / concat <= 2,
other sessions' p99 beside / alone <= 1.5.
Each measurement is one function of a ``Run``; add one to ``MEASURES`` to extend it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]

from seedproxy.engine.model import default_gguf_path, gguf_tokenizer_dir  # noqa: E402
from seedproxy.proxy.app import create_app  # noqa: E402
from seedproxy.sessions import SessionStore, open_store  # noqa: E402
from seedproxy.settings import Settings  # noqa: E402
from tests.helpers.fake_sglang import Switches, create_fake_sglang  # noqa: E402
from tests.helpers.procs import free_port, seedproxy_env, wait_http  # noqa: E402
from tests.helpers.redis_server import RedisServer, redis_or_skip  # noqa: E402
from tests.helpers.servers import ServerThread  # noqa: E402

TITO = {"token_in_token_out": True,
        "tokenizer": str(gguf_tokenizer_dir(default_gguf_path())),
        "chat_template": str(ROOT / "tests" / "helpers" / "qwen3_style.jinja")}
WINDOWS = ((1, 10), (91, 100), (191, 200))


@dataclass
class Run:
    """One rollout through one proxy: what the measures read."""

    mode: str
    store: str
    url: str
    base: str
    session: str
    overhead_ms: list[float] = field(default_factory=list)
    """Per turn, in order (turn 1 first)."""
    cpu_ms: list[float] = field(default_factory=list)
    """Per turn: the CPU the proxy's threads spent on it (this process's CPU less the
    client's thread's), which a loaded machine or a slow disk does not stretch."""
    alone_ms: list[float] = field(default_factory=list)
    beside_ms: list[float] = field(default_factory=list)
    """Other sessions' short requests (client latency): alone, and beside the rollout's
    ``BESIDE_TURNS`` turns past ``--turns``."""


def _windows(run: Run, series: str = "overhead_ms") -> str:
    means = []
    for first, last in WINDOWS:
        values = getattr(run, series)[first - 1:last]
        means.append(statistics.fmean(values) if values else float("nan"))
    shown = " ".join(f"{a}-{b}: {m:6.2f} ms" for (a, b), m in zip(WINDOWS, means, strict=True))
    return f"{shown}   last/first {means[-1] / means[0]:.2f}x"


def _stored(run: Run) -> str:
    async def measure() -> int:
        store = open_store(run.url)
        try:
            return int(await store.stored_bytes())  # type: ignore[attr-defined]
        finally:
            await store.close()

    stored = _memory_bytes[run.base]() if run.store == "memory" else asyncio.run(measure())
    concat = len(httpx.get(f"{run.base}/sessions/{run.session}/trajectory",
                           params={"style": "concat"}, timeout=120).content)
    tokens = httpx.get(f"{run.base}/sessions/{run.session}/trajectory",
                       params={"style": "concat"}, timeout=120).json()["token_ids"]
    return (f"stored {stored / 1e6:6.2f} MB, concat {concat / 1e6:6.2f} MB "
            f"({len(tokens or [])} tokens): stored/concat {stored / concat:.2f}x")


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def _others(run: Run) -> str:
    a50, a99 = _quantile(run.alone_ms, 0.5), _quantile(run.alone_ms, 0.99)
    b50, b99 = _quantile(run.beside_ms, 0.5), _quantile(run.beside_ms, 0.99)
    return (f"8 other sessions' short requests: alone p50 {a50:6.2f} p99 {a99:6.2f} ms "
            f"({len(run.alone_ms)}), beside p50 {b50:6.2f} p99 {b99:6.2f} ms "
            f"({len(run.beside_ms)}): p99 beside/alone {b99 / a99:.2f}x")


MEASURES: dict[str, Callable[[Run], str]] = {
    "per turn": _windows, "cpu/turn": lambda run: _windows(run, "cpu_ms"),
    "bytes": _stored, "others": _others}
OTHERS = 8
BESIDE_TURNS = 20
"""Turns the rollout runs past ``--turns`` with the other sessions beside it."""


def _short_requests(run: Run, into: list[float], stop: threading.Event, count: int) -> None:
    """``OTHERS`` sessions, each sending short chat requests one after another, 20 ms
    apart: ``count`` each, or until ``stop``."""
    def one(k: int) -> None:
        with httpx.Client(base_url=f"{run.base}/sessions/other-{run.mode}-{k}",
                          timeout=120) as http:
            sent = 0
            while sent < count and not stop.is_set():
                started = time.perf_counter()
                answer = http.post("/v1/chat/completions", json={
                    "model": "m", "max_tokens": 4,
                    "messages": [{"role": "user", "content": f"short {sent}"}]})
                answer.raise_for_status()
                into.append((time.perf_counter() - started) * 1000)
                sent += 1
                stop.wait(0.02)

    workers = [threading.Thread(target=one, args=(k,)) for k in range(OTHERS)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
_memory_bytes: dict[str, Callable[[], int]] = {}


def _rollout(run: Run, turns: int, words: int) -> None:
    messages: list[Any] = [{"role": "system", "content": "You are a careful agent."}]
    _short_requests(run, run.alone_ms, threading.Event(), 10)
    stop = threading.Event()
    beside = threading.Thread(target=_short_requests,
                              args=(run, run.beside_ms, stop, 1 << 30))
    with httpx.Client(base_url=f"{run.base}/sessions/{run.session}", timeout=120) as http:
        for turn in range(turns + BESIDE_TURNS):
            if turn == turns:  # past the measured windows: those turns run alone
                beside.start()
            text = " ".join(f"w{(turn * words + k) % 997}" for k in range(words))
            messages.append({"role": "user", "content": f"Step {turn}: {text}"})
            body = httpx.Request("POST", "/", json={
                "model": "m", "messages": messages, "max_tokens": 32}).content
            cpu, mine = time.process_time(), time.thread_time()
            answer = http.post("/v1/chat/completions", content=body,
                               headers={"content-type": "application/json"})
            cpu, mine = time.process_time() - cpu, time.thread_time() - mine
            answer.raise_for_status()
            run.overhead_ms.append(float(answer.headers["x-seedproxy-overhead-ms"]))
            run.cpu_ms.append((cpu - mine) * 1000)
            reply = answer.json()["choices"][0]["message"]
            messages.append({"role": "assistant", "content": reply["content"]})
    stop.set()
    if beside.is_alive():
        beside.join()


FAKE = ("import sys, uvicorn; from tests.helpers.fake_sglang import Switches, "
        "create_fake_sglang; uvicorn.run(create_fake_sglang(Switches(context_length=1 << 20, "
        "chars_per_token=4)), host='127.0.0.1', port=int(sys.argv[1]), log_level='warning')")


@contextlib.contextmanager
def _fake_process() -> Any:
    """The fake SGLang in a child process; yields an object with its ``url``."""
    port = free_port()
    env = seedproxy_env(PYTHONPATH=f"{ROOT / 'src'}:{ROOT}")
    child = subprocess.Popen([sys.executable, "-c", FAKE, str(port)], cwd=ROOT, env=env)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_http(f"{url}/health", proc=child)
        yield type("Fake", (), {"url": url})()
    finally:
        child.terminate()
        child.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--words", type=int, default=60)
    parser.add_argument("--stores", default="memory,sqlite,redis")
    parser.add_argument("--modes", default="passthrough,tito")
    parser.add_argument("--fake-in-process", action="store_true",
                        help="run the fake SGLang on a thread of this process")
    args = parser.parse_args()
    redis = RedisServer(redis_or_skip()) if "redis" in args.stores else None
    # A real tokenizer's count of prompt ids (about 4 characters each), not one a character.
    switches = Switches(context_length=1 << 20, chars_per_token=4)
    print(f"{args.turns} turns, {args.words} words per user message, max_tokens 32")
    fake_server = (ServerThread(create_fake_sglang(switches)) if args.fake_in_process
                   else _fake_process())
    with tempfile.TemporaryDirectory() as tmp, fake_server as fake:
        for mode in args.modes.split(","):
            for kind in args.stores.split(","):
                url = {"memory": "memory://", "sqlite": f"sqlite:///{tmp}/{mode}.db",
                       "redis": f"{redis.url}?prefix={mode}:" if redis else ""}[kind]
                store: SessionStore | None = open_store(url) if kind == "memory" else None
                settings = Settings(upstream=[fake.url], store=url,
                                    **(TITO if mode == "tito" else {}))
                with ServerThread(create_app(settings, store=store)) as proxy:
                    if store is not None:
                        _memory_bytes[proxy.url] = lambda s=store: asyncio.run(
                            s.stored_bytes())  # type: ignore[attr-defined]
                    run = Run(mode, kind, url, proxy.url, f"long-{mode}")
                    _rollout(run, args.turns, args.words)
                    for name, measure in MEASURES.items():
                        print(f"{mode:11s} {kind:6s} {name:8s} {measure(run)}", flush=True)
    if redis is not None:
        redis.stop()


if __name__ == "__main__":
    main()
