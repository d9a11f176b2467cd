"""How many seedproxy modules and functions one request runs through, counted, not read.

The proxy runs in this process (``seedproxy serve``'s own command, in the main thread)
with a profile hook that, while a request is being measured, notes every seedproxy
function called. A client thread warms the path up, then measures one request of each
kind: a streamed chat request in a session (passthrough), and, with ``--tito``, a second
turn of a token-in-token-out conversation (a non-streamed one, against ``bench/tito.py``'s
fake upstream, which answers ``/generate``).

    python bench/hops.py            # streamed chat in a session, passthrough
    python bench/hops.py --tito     # a TITO turn (SmolLM2's tokenizer, Qwen3-style template)
    python bench/hops.py --list     # ... and the modules, with their functions

Run it from the revision to count; the figures are in docs/pipeline.md.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from types import FrameType
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
BENCH = ROOT / "bench"
sys.path.insert(0, str(BENCH))
from overhead import free_port  # noqa: E402

calls: dict[str, set[str]] = defaultdict(set)
recording = threading.Event()


def _profile(frame: FrameType, event: str, arg: Any) -> None:
    if event == "call" and recording.is_set():
        module = frame.f_globals.get("__name__", "")
        if module.startswith("seedproxy."):
            calls[module].add(frame.f_code.co_qualname)


def _wait(url: str) -> None:
    for _ in range(1200):
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise SystemExit(f"{url} did not start")


def _drive(base: str, tito: bool, done: list[dict[str, set[str]]]) -> None:
    """Warm up, then measure one request; then stop the server (SIGINT, as Ctrl-C)."""
    try:
        _wait(base + "/healthz")
        with httpx.Client(timeout=120) as client:
            for n in range(3):  # warm-up: every lazy import and cache filled
                _request(client, base, f"warm-{n}", tito)
            recording.set()
            _request(client, base, "measured", tito)
            recording.clear()
        done.append({m: set(f) for m, f in calls.items()})
    finally:
        os.kill(os.getpid(), signal.SIGINT)


def _request(client: httpx.Client, base: str, session: str, tito: bool) -> None:
    url = f"{base}/sessions/{session}/v1/chat/completions"
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are an agent."},
                                      {"role": "user", "content": "Start."}]
    if tito:  # the measured request is the second turn: it extends the first's tokens
        first = client.post(url, json={"model": "m", "messages": messages, "max_tokens": 64})
        first.raise_for_status()
        recorded = recording.is_set()
        recording.clear()
        messages += [first.json()["choices"][0]["message"], {"role": "user", "content": "Go."}]
        if recorded:
            calls.clear()
            recording.set()
        client.post(url, json={"model": "m", "messages": messages,
                               "max_tokens": 64}).raise_for_status()
        return
    with client.stream("POST", url, json={"model": "m", "messages": messages,
                                          "max_tokens": 32, "stream": True}) as reply:
        reply.raise_for_status()
        for _ in reply.iter_bytes():
            pass


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tito", action="store_true")
    parser.add_argument("--list", action="store_true")
    args = parser.parse_args()
    up = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    if args.tito:
        upstream = [sys.executable, str(BENCH / "tito.py"), "--upstream-only", str(up)]
    else:
        upstream = [sys.executable, str(BENCH / "fake_upstream.py"), "--port", str(up)]
    proc = subprocess.Popen(upstream, env=env, stdout=subprocess.DEVNULL)
    try:
        _wait(f"http://127.0.0.1:{up}/health" if not args.tito else f"http://127.0.0.1:{up}/")
        port = free_port()
        flags = ["serve", "--upstream", f"http://127.0.0.1:{up}", "--port", str(port)]
        if args.tito:
            from seedproxy.engine.model import default_gguf_path, gguf_tokenizer_dir

            flags += ["--token-in-token-out", "--tokenizer",
                      str(gguf_tokenizer_dir(default_gguf_path())), "--chat-template",
                      str(ROOT / "tests/helpers/qwen3_style.jinja"), "--tool-parser", "hermes",
                      "--reasoning-parser", "think"]
        os.environ["SEEDPROXY_LOG_REQUESTS"] = "false"
        done: list[dict[str, set[str]]] = []
        threading.Thread(target=_drive, args=(f"http://127.0.0.1:{port}", args.tito, done),
                         daemon=True).start()
        from seedproxy.commands.cli import main as cli

        sys.setprofile(_profile)
        try:
            cli(flags)
        finally:
            sys.setprofile(None)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    if not done:
        raise SystemExit("the measured request did not complete")
    found = done[0]
    kind = "a TITO turn (the second)" if args.tito else "a streamed chat request in a session"
    functions = sum(len(f) for f in found.values())
    print(f"{kind}: {len(found)} seedproxy modules, {functions} distinct functions")
    if args.list:
        for module in sorted(found):
            print(f"  {module}: {', '.join(sorted(found[module]))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
