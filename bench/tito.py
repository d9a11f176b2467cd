"""Token-in-token-out mode's CPU per request against passthrough, in one run.

Two seedproxy processes in front of one fake upstream (this file, ``--upstream-only``):
one passes chat through (/v1/chat/completions with token-id capture), one renders
the chat template itself and sends /generate with input_ids (SmolLM2's tokenizer,
the Qwen3-style test template, hermes and think parsers). The same 5-turn
conversations go through each, interleaved by round; each proxy's CPU (user + system,
from /proc) is divided by its requests. Both answers carry the same 32 tokens.

    python bench/tito.py [--sessions 20] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
TEXT = " ".join(f"word{i}" for i in range(24))


def _fake(port: int) -> None:
    import orjson
    import uvicorn
    from transformers import AutoTokenizer

    sys.path.insert(0, str(ROOT / "src"))
    sys.path.insert(0, str(ROOT / "bench"))
    from fake_upstream import SERVER_INFO

    from seedproxy.engine.model import default_gguf_path, gguf_tokenizer_dir

    tok = AutoTokenizer.from_pretrained(str(gguf_tokenizer_dir(default_gguf_path())))
    ids = tok.encode(TEXT, add_special_tokens=False) + [tok.eos_token_id]
    lps = [-0.5] * len(ids)

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        if scope["method"] == "GET":  # /get_server_info: a deterministic SGLang (preflight)
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": SERVER_INFO
                        if scope["path"] == "/get_server_info" else b"{}"})
            return
        request = orjson.loads(body) if body else {}
        if scope["path"] == "/generate":
            answer: dict[str, Any] = {"text": TEXT, "output_ids": ids, "meta_info": {
                "id": "g", "finish_reason": {"type": "stop", "matched": ids[-1]},
                "prompt_tokens": len(request["input_ids"]), "completion_tokens": len(ids),
                "output_token_logprobs": [[lp, t, None] for lp, t in zip(lps, ids, strict=True)]}}
        else:
            answer = {"id": "c", "object": "chat.completion", "created": 0, "model": "m",
                      "choices": [{"index": 0, "message": {"role": "assistant", "content": TEXT},
                                   "logprobs": {"content": [
                                       {"token": "w", "logprob": lp, "bytes": None,
                                        "top_logprobs": []} for lp in lps]},
                                   "finish_reason": "stop", "prompt_token_ids": list(range(300)),
                                   "response_token_ids": ids}],
                      "usage": {"prompt_tokens": 300, "completion_tokens": len(ids),
                                "total_tokens": 300 + len(ids)}}
        data = orjson.dumps(answer)
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": data})

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait(url: str) -> None:
    for _ in range(600):
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise SystemExit(f"{url} did not start")


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _conversation(client: httpx.Client, base: str, session: str) -> int:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are an agent."},
                                      {"role": "user", "content": "Start."}]
    for turn in range(5):
        reply = client.post(f"{base}/sessions/{session}/v1/chat/completions",
                            json={"model": "m", "messages": messages, "max_tokens": 64})
        reply.raise_for_status()
        messages.append(reply.json()["choices"][0]["message"])
        messages.append({"role": "user", "content": f"Next step {turn}."})
    return 5


def flags() -> list[str]:
    """``seedproxy serve``'s flags for token-in-token-out against this file's upstream."""
    sys.path.insert(0, str(ROOT / "src"))
    from seedproxy.engine.model import default_gguf_path, gguf_tokenizer_dir

    return ["--token-in-token-out", "--tokenizer", str(gguf_tokenizer_dir(default_gguf_path())),
            "--chat-template", str(ROOT / "tests/helpers/qwen3_style.jinja"),
            "--tool-parser", "hermes", "--reasoning-parser", "think"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--upstream-only", type=int)
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.upstream_only:
        _fake(args.upstream_only)
        return
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    up = _free_port()
    procs = [subprocess.Popen([sys.executable, __file__, "--upstream-only", str(up)], env=env)]
    tito_flags = flags()
    proxies = {}
    try:
        _wait(f"http://127.0.0.1:{up}/")
        for name, extra in (("passthrough", []), ("tito", tito_flags)):
            port = _free_port()
            proc = subprocess.Popen([sys.executable, "-m", "seedproxy", "serve", "--upstream",
                                     f"http://127.0.0.1:{up}", "--port", str(port), *extra],
                                    env={**env, "SEEDPROXY_LOG_REQUESTS": "false"})
            procs.append(proc)
            proxies[name] = (proc, f"http://127.0.0.1:{port}")
            _wait(f"http://127.0.0.1:{port}/healthz")
        cpu = {name: 0.0 for name in proxies}
        count = {name: 0 for name in proxies}
        with httpx.Client(timeout=60) as client:
            for name, (_, base) in proxies.items():  # warm-up
                _conversation(client, base, f"warm-{name}")
            for r in range(args.rounds):
                for name, (proc, base) in proxies.items():
                    before = _cpu_s(proc.pid)
                    for s in range(args.sessions):
                        count[name] += _conversation(client, base, f"r{r}-s{s}")
                    cpu[name] += _cpu_s(proc.pid) - before
        per = {name: cpu[name] / count[name] * 1e6 for name in proxies}
        result = {"cpu_us_per_request": {k: round(v, 1) for k, v in per.items()},
                  "ratio_tito_over_passthrough": round(per["tito"] / per["passthrough"], 2),
                  "requests_each": count["tito"]}
        print(json.dumps(result, indent=2))
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=30)


if __name__ == "__main__":
    main()
