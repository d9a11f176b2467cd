"""Bytes per recorded token in the memory store.

Records ``--interactions`` chat interactions of ``--prompt`` prompt tokens and
``--completion`` completion tokens each, parsed by the SGLang backend from real
answer bodies (as the proxy does), and reports tracemalloc's growth per recorded
token: for the token-level arrays alone (target <= 12 B/token) and for everything
an interaction keeps (with the client-visible request and response).

    python bench/memory.py [--interactions 200] [--prompt 1024] [--completion 512]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import tracemalloc
from array import array
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from seedproxy.dialects import Endpoint, SGLangBackend  # noqa: E402
from seedproxy.sessions import Interaction, MemoryStore, SessionRecord  # noqa: E402


def answer(prompt: int, completion: int, k: int) -> dict:
    ids = [100_000 + (k * 31 + i * 7) % 50_000 for i in range(completion)]
    return {
        "id": f"c{k}",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "finish_reason": "length",
                "message": {"role": "assistant", "content": " w" * completion},
                "logprobs": {
                    "content": [
                        {
                            "token": "w",
                            "logprob": -0.01 * (i % 300),
                            "bytes": None,
                            "top_logprobs": [],
                        }
                        for i in range(completion)
                    ]
                },
                "prompt_token_ids": list(range(k, k + prompt)),
                "response_token_ids": ids,
            }
        ],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion},
    }


async def measure(interactions: int, prompt: int, completion: int) -> tuple[float, float]:
    backend = SGLangBackend()
    store = MemoryStore()
    await store.create(SessionRecord("bench", "bench", "k"))
    body = {"messages": [{"role": "user", "content": "x" * 64}]}
    answers = [answer(prompt, completion, k) for k in range(interactions)]
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    arrays = 0
    for k, raw in enumerate(answers):
        shown, captured = backend.finish(Endpoint.CHAT, body, raw)
        record = Interaction(
            interaction_id=f"i{k}",
            request_index=k,
            seeds=[k],
            endpoint=Endpoint.CHAT.value,
            request=body,
            response=shown,
            prompt_token_ids=array("i", captured.prompt_token_ids),
            choices=captured.choices,
        )
        arrays += sys.getsizeof(record.prompt_token_ids) + sum(
            sys.getsizeof(c.token_ids) + sys.getsizeof(c.logprobs) for c in record.choices
        )
        await store.record("bench", record)
    answers.clear()  # what the store keeps is all that remains
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    tokens = interactions * (prompt + completion)
    return arrays / tokens, (after - before) / tokens


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--interactions", type=int, default=200)
    parser.add_argument("--prompt", type=int, default=1024)
    parser.add_argument("--completion", type=int, default=512)
    args = parser.parse_args()
    token_bytes, total_bytes = asyncio.run(measure(args.interactions, args.prompt, args.completion))
    print(f"interactions={args.interactions} prompt={args.prompt} completion={args.completion}")
    print(f"token arrays: {token_bytes:.2f} B/token (target <= 12)")
    print(f"whole interaction incl. request/response text: {total_bytes:.2f} B/token")


if __name__ == "__main__":
    main()
