"""Event-loop time spent on one large echoed prompt: a chat answer whose
``prompt_token_ids`` hold ``--ids`` ids (7.8M is what a 30 MB prompt echoes), read as
the proxy reads it (parse, shape check, the SGLang backend's capture, the record's
packed array). Reported as ratios against the per-id check (the baseline, swapped
in for the same run) on the same bytes.

    python bench/echo_validation.py [--ids 7800000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import sys
import time
from array import array
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import seedproxy.dialects.sglang as sglang_module  # noqa: E402
from seedproxy.dialects import Endpoint, SGLangBackend  # noqa: E402
from seedproxy.wire.answer_shape import check_answer  # noqa: E402
from seedproxy.wire.shapes import ints  # noqa: E402

_MAX = 2**31 - 1


def per_id(value: Any) -> list[int]:
    """The baseline: one Python step per id."""
    if not isinstance(value, list):
        return []
    return value if all(type(v) is int and 0 <= v <= _MAX for v in value) else []


def body(count: int) -> bytes:
    prompt = [(i * 7919) % 151_000 for i in range(count)]
    return orjson.dumps({
        "id": "c", "object": "chat.completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": "ok"},
                     "prompt_token_ids": prompt, "token_ids": [1, 2, 3]}],
        "usage": {"prompt_tokens": count, "completion_tokens": 3, "total_tokens": count + 3},
    })


def best(repeat: int, step: Callable[[], object]) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        step()
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ids", type=int, default=7_800_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    raw = body(args.ids)
    backend = SGLangBackend()
    client = {"model": "m", "messages": [{"role": "user", "content": "x"}]}

    def whole() -> None:
        answer = orjson.loads(raw)
        check_answer(Endpoint.CHAT, answer)
        _, captured = backend.finish(Endpoint.CHAT, client, answer)
        assert len(captured.prompt_token_ids) == args.ids
        array("i", captured.prompt_token_ids)

    ids = orjson.loads(raw)["choices"][0]["prompt_token_ids"]
    check_new = best(args.repeat, lambda: ints(ids))
    check_old = best(args.repeat, lambda: per_id(ids))
    whole_new = best(args.repeat, whole)
    sglang_module.ints = per_id  # type: ignore[assignment]
    whole_old = best(args.repeat, whole)
    sglang_module.ints = ints  # type: ignore[assignment]
    parse = best(args.repeat, lambda: orjson.loads(raw))
    print(f"{args.ids} ids, {len(raw) / 1e6:.1f} MB answer, best of {args.repeat}")
    print(f"id check:        {check_new:.3f} s vs per-id {check_old:.3f} s "
          f"({check_new / check_old:.2f}x)")
    print(f"whole read:      {whole_new:.3f} s vs per-id {whole_old:.3f} s "
          f"({whole_new / whole_old:.2f}x)")
    print(f"of which parse:  {parse:.3f} s ({parse / whole_new:.0%} of the whole read)")


if __name__ == "__main__":
    main()
