"""A GRPO-style rollout loop against seedproxy, with the openai SDK and plain HTTP.

For each task it opens a group of sessions (one per sample), runs a multi-turn chat
in every session concurrently, scores the final answer, attaches the reward, ends
the session and exports the group's token-level trajectories to JSON Lines.

Sessions finish in a random order on purpose: with a deterministic proxy the export
comes in creation order all the same, so rerunning this script against a fresh proxy
writes the same bytes (timings aside: ``latency_ms``, ``upstream``).

    seedproxy serve --upstream http://127.0.0.1:30000 &
    python examples/rl_loop.py --url http://127.0.0.1:8000 --out rollouts.jsonl
"""

from __future__ import annotations

import argparse
import asyncio
import random
from typing import Any

import httpx
import openai
import orjson

TURNS = ("Solve task {task}. Think step by step.", "Check your work.", "Give the final answer.")


def score(text: str) -> float:
    """A toy verifier: the share of words that contain the letter 'a'."""
    words = text.split()
    return round(sum("a" in w for w in words) / len(words), 6) if words else 0.0


async def rollout(
    admin: httpx.AsyncClient, session: dict[str, Any], task: int, jitter: random.Random
) -> None:
    """One sample: a multi-turn chat through the session's own base_url."""
    client = openai.AsyncOpenAI(
        base_url=session["base_url"], api_key=session["api_key"], max_retries=2
    )
    messages: list[Any] = [{"role": "system", "content": "You are a careful solver."}]
    reply = ""
    async with client:
        for prompt in TURNS:
            messages.append({"role": "user", "content": prompt.format(task=task)})
            answer = await client.chat.completions.create(
                model="default", messages=messages, max_tokens=12, temperature=1.0
            )
            reply = answer.choices[0].message.content or ""
            messages.append({"role": "assistant", "content": reply})
    await asyncio.sleep(jitter.random() * 0.05)  # finish in an arbitrary order
    sid = session["session_id"]
    (await admin.post(f"/sessions/{sid}/reward", json={"reward": score(reply)})).raise_for_status()
    (await admin.post(f"/sessions/{sid}/end")).raise_for_status()


async def run(
    url: str, tasks: int, group_size: int, out: str, style: str, admin_key: str | None
) -> int:
    headers = {"authorization": f"Bearer {admin_key}"} if admin_key else {}
    jitter = random.Random()  # deliberately unseeded: timing must not matter
    written = 0
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=120) as admin:
        with open(out, "wb") as handle:
            for task in range(tasks):
                made = await admin.post(
                    "/sessions",
                    json={
                        "identity": f"task{task}",
                        "group_size": group_size,
                        "metadata": {"task": task},
                    },
                )
                made.raise_for_status()
                group = made.json()
                await asyncio.gather(*(rollout(admin, s, task, jitter) for s in group["sessions"]))
                exported = await admin.post(
                    "/trajectories/export",
                    json={
                        "group_id": group["group_id"],
                        "count": group_size,
                        "timeout_s": 60,
                        "style": style,
                    },
                )
                exported.raise_for_status()
                for trajectory in exported.json()["trajectories"]:
                    handle.write(orjson.dumps(trajectory, option=orjson.OPT_SORT_KEYS) + b"\n")
                    written += 1
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
