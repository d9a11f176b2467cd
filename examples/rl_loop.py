"""A GRPO-style rollout loop against seedproxy, on ``seedproxy.client``.

For each task it opens a group of sessions (one per sample), runs a multi-turn chat
in every session concurrently, scores the final answer, attaches the reward, ends
the session and exports the group's token-level trajectories to JSON Lines.

Sessions finish in a random order on purpose: with a deterministic proxy the export
comes in creation order all the same, so rerunning this script against a fresh proxy
writes the same bytes except in two clock fields of each interaction: ``latency_ms``
and the response's ``created``.

    seedproxy serve --upstream http://127.0.0.1:30000 &
    python examples/rl_loop.py --url http://127.0.0.1:8000 --out rollouts.jsonl
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import random
from typing import Any, cast

from seedproxy.client import Sample, SeedProxyClient, Style, write_jsonl

TURNS = ("Solve task {task}. Think step by step.", "Check your work.", "Give the final answer.")


def score(text: str) -> float:
    """A toy verifier: the share of words that contain the letter 'a'."""
    words = text.split()
    return round(sum("a" in w for w in words) / len(words), 6) if words else 0.0


async def solve(sample: Sample, task: int, jitter: random.Random) -> str:
    """One sample: a multi-turn chat through the session's own client."""
    messages: list[Any] = [{"role": "system", "content": "You are a careful solver."}]
    reply = ""
    async with sample.async_openai(max_retries=2) as client:
        for prompt in TURNS:
            messages.append({"role": "user", "content": prompt.format(task=task)})
            answer = await client.chat.completions.create(
                model="default", messages=messages, max_tokens=12, temperature=1.0
            )
            reply = answer.choices[0].message.content or ""
            messages.append({"role": "assistant", "content": reply})
    await asyncio.sleep(jitter.random() * 0.05)  # finish in an arbitrary order
    return reply


async def run(
    url: str, tasks: int, group_size: int, out: str, style: str, admin_key: str | None
) -> int:
    jitter = random.Random()  # deliberately unseeded: timing must not matter
    written = 0
    async with SeedProxyClient(url, admin_key=admin_key) as proxy:
        with open(out, "wb") as handle:
            for task in range(tasks):
                group = await proxy.create_group(
                    f"task{task}", k=group_size, metadata={"task": task}
                )
                await group.run(
                    functools.partial(solve, task=task, jitter=jitter),
                    concurrency=group_size,
                    reward=score,
                    end=True,
                )
                trajectories = await group.export(style=cast(Style, style))
                written += write_jsonl(trajectories, handle)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", default="http://127.0.0.1:8000", help="the proxy's root URL")
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--style", choices=["individual", "concat"], default="individual")
    parser.add_argument("--admin-key")
    parser.add_argument("--out", default="rollouts.jsonl")
    args = parser.parse_args()
    written = asyncio.run(
        run(args.url, args.tasks, args.group_size, args.out, args.style, args.admin_key)
    )
    print(f"wrote {written} trajectories to {args.out}")


if __name__ == "__main__":
    main()
