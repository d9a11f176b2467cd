"""A fast fake OpenAI/SGLang upstream for the overhead benchmark: a bare ASGI app that
answers chat completions at once from pre-encoded bytes.

Non-streaming answers carry token ids and logprobs when asked (SGLang's
``return_token_ids`` / ``logprobs``), so a capturing proxy does its real work;
streaming answers are 32 content chunks (each its own write, the first at once,
the rest ``BENCH_CHUNK_GAP_MS`` apart, 1 by default), SGLang's ``sglext``
chunk when the ``x-sglext-return-*`` headers ask, and ``[DONE]``. A body with
``"bench_large_echo": true`` gets an answer echoing ``BENCH_PROMPT_IDS`` prompt ids.

    python bench/fake_upstream.py --port P [--cpu N]
"""

from __future__ import annotations

import argparse
import asyncio
import os
from typing import Any

import orjson

CHUNKS = 32
PROMPT_IDS = list(range(1000, 1024))
LARGE_PROMPT_IDS = [(i * 7919) % 151_000
                    for i in range(int(os.environ.get("BENCH_PROMPT_IDS", "0")))]
"""Echoed (with token ids) to a body with ``"bench_large_echo": true``
(bench/parse_stall.py)."""
OUTPUT_IDS = list(range(2000, 2000 + CHUNKS))
WORDS = [f" w{i}" for i in range(CHUNKS)]


def _logprobs() -> dict[str, Any]:
    return {
        "content": [{"token": w, "logprob": -0.5, "bytes": None, "top_logprobs": []} for w in WORDS]
    }


def _answer(logprobs: bool, ids: bool, prompt: list[int] = PROMPT_IDS) -> bytes:
    choice: dict[str, Any] = {
        "index": 0,
        "message": {"role": "assistant", "content": "".join(WORDS)},
        "logprobs": _logprobs() if logprobs else None,
        "finish_reason": "stop",
    }
    if ids:
        choice["prompt_token_ids"] = prompt
        choice["token_ids"] = OUTPUT_IDS
    return orjson.dumps(
        {
            "id": "chatcmpl-bench",
            "object": "chat.completion",
            "created": 1,
            "model": "bench-model",
            "choices": [choice],
            "usage": {
                "prompt_tokens": len(prompt),
                "completion_tokens": CHUNKS,
                "total_tokens": len(prompt) + CHUNKS,
            },
        }
    )


def _events(logprobs: bool, sglext: bool) -> list[bytes]:
    events = []
    for i, word in enumerate(WORDS):
        lp = {"content": [{"token": word, "logprob": -0.5, "bytes": None, "top_logprobs": []}]}
        events.append(
            b"data: "
            + orjson.dumps(
                {
                    "id": "chatcmpl-bench",
                    "object": "chat.completion.chunk",
                    "created": 1,
                    "model": "bench-model",
                    "choices": [
                        {
                            "index": 0,
                            "delta": {"content": word}
                            if i
                            else {"role": "assistant", "content": word},
                            "logprobs": lp if logprobs else None,
                            "finish_reason": "stop" if i == CHUNKS - 1 else None,
                        }
                    ],
                }
            )
            + b"\n\n"
        )
    if sglext:
        events.append(
            b"data: "
            + orjson.dumps(
                {
                    "id": "chatcmpl-bench",
                    "object": "chat.completion.chunk",
                    "created": 1,
                    "model": "bench-model",
                    "choices": [],
                    "sglext": {"input_ids": PROMPT_IDS, "output_ids": [OUTPUT_IDS]},
                }
            )
            + b"\n\n"
        )
    events.append(b"data: [DONE]\n\n")
    return events


ANSWERS = {(lp, ids): _answer(lp, ids) for lp in (False, True) for ids in (False, True)}
LARGE_ANSWER = _answer(False, True, LARGE_PROMPT_IDS) if LARGE_PROMPT_IDS else None
STREAMS = {(lp, ext): _events(lp, ext) for lp in (False, True) for ext in (False, True)}
MODELS = orjson.dumps(
    {
        "object": "list",
        "data": [{"id": "bench-model", "object": "model", "created": 1, "owned_by": "bench"}],
    }
)
SERVER_INFO = orjson.dumps(  # a deterministic SGLang server, for seedproxy's preflight
    {"enable_deterministic_inference": True, "attention_backend": "fa3",
     "disable_radix_cache": False, "speculative_algorithm": None,
     "sampling_backend": "pytorch", "weight_version": "default"}
)
GAP_S = float(os.environ.get("BENCH_CHUNK_GAP_MS", "1")) / 1000
JSON = [(b"content-type", b"application/json")]
SSE = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    path = scope["path"]
    if scope["method"] == "GET":
        body = (MODELS if path.endswith("/models")
                else SERVER_INFO if path == "/get_server_info" else b"{}")
        await _send(send, 200, JSON, body)
        return
    parts = []
    while True:
        message = await receive()
        parts.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    raw = b"".join(parts)
    if not path.endswith("/chat/completions"):
        await _send(send, 404, JSON, b'{"error":{"message":"not found"}}')
        return
    body = orjson.loads(raw)
    logprobs = bool(body.get("logprobs"))
    if body.get("stream"):
        headers = dict(scope["headers"])
        sglext = headers.get(b"x-sglext-return-output-ids") == b"1"
        await send({"type": "http.response.start", "status": 200, "headers": SSE})
        for i, event in enumerate(STREAMS[(logprobs, sglext)]):
            if i and GAP_S:
                await asyncio.sleep(GAP_S)  # tokens come paced, as from a real server
            await send({"type": "http.response.body", "body": event, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return
    ids = bool(body.get("return_token_ids") or body.get("return_prompt_token_ids"))
    if ids and body.get("bench_large_echo") is True and LARGE_ANSWER is not None:
        await _send(send, 200, JSON, LARGE_ANSWER)
        return
    await _send(send, 200, JSON, ANSWERS[(logprobs, ids)])


async def _send(send: Any, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [*headers, (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--cpu", type=int, help="pin to this core")
    args = parser.parse_args()
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    import uvicorn

    uvicorn.run(
        app,
        host="127.0.0.1",
        port=args.port,
        log_level="warning",
        access_log=False,
        loop="uvloop",
        http="httptools",
        lifespan="on",
        backlog=4096,
    )


if __name__ == "__main__":
    main()
