"""The content-keyed index mode: an agent firing sibling calls in a random order with
random delays gets the same seeds, outputs and exports on every run; in the default
arrival mode the same agent's results depend on the order its siblings arrive in."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Sequence
from typing import Any

import httpx
import orjson

from seedproxy import derive_seed
from seedproxy.seeds import content_key, content_seeds
from tests.conftest import Fake
from tests.helpers.replay_fields import strip_documented

STEPS, SIBLINGS = 5, 4
VARYING = ("request_index",)
"""The field of an interaction that counts arrivals; the documented clock fields
(``latency_ms``, ``created``, timestamps, at any depth) go too (``strip_documented``)."""


def ask(step: int, branch: int, context: str) -> dict[str, Any]:
    return {
        "model": "m",
        "max_tokens": 3,
        "messages": [{"role": "user", "content": f"step {step} branch {branch} after:{context}"}],
    }


async def agent(
    proxy: str,
    http: httpx.Client,
    index_by: str | None,
    order: Callable[[int], Sequence[int]],
    delay: Callable[[], float] | None,
) -> tuple[list[list[str]], list[list[int]], dict[str, Any]]:
    """Run the agent in a fresh session of identity "agent"; return its outputs and
    seeds per step (in branch order) and the session's export."""
    body: dict[str, Any] = {"identity": "agent"}
    if index_by is not None:
        body["index_by"] = index_by
    session = http.post("/sessions", json=body).json()["sessions"][0]["session_id"]
    outputs: list[list[str]] = []
    seeds: list[list[int]] = []
    context = ""
    async with httpx.AsyncClient(base_url=f"{proxy}/sessions/{session}", timeout=30) as client:

        async def call(step: int, branch: int) -> tuple[str, int]:
            if delay is not None:
                await asyncio.sleep(delay())
            r = await client.post("/v1/chat/completions", json=ask(step, branch, context))
            assert r.status_code == 200, r.text
            return r.json()["choices"][0]["message"]["content"], int(r.headers["x-seedproxy-seed"])

        for step in range(STEPS):
            answers: dict[int, tuple[str, int]] = {}
            if delay is None:  # a controlled arrival order: one sibling after the other
                for branch in order(step):
                    answers[branch] = await call(step, branch)
            else:
                branches = list(order(step))
                got = await asyncio.gather(*(call(step, b) for b in branches))
                answers = dict(zip(branches, got, strict=True))
            outputs.append([answers[b][0] for b in range(SIBLINGS)])
            seeds.append([answers[b][1] for b in range(SIBLINGS)])
            context = "|".join(outputs[-1])
    http.post(f"/sessions/{session}/end")
    exported = http.post("/trajectories/export", json={"session_ids": [session]}).json()
    return outputs, seeds, exported["trajectories"][0]


def stable(export: dict[str, Any]) -> bytes:
    """The export without the physical session's name and the per-arrival fields."""
    interactions = [
        {k: v for k, v in strip_documented(i).items() if k not in VARYING}
        for i in export["interactions"]
    ]
    return orjson.dumps({"identity": export["identity"], "interactions": interactions})


def test_ten_shuffled_runs_give_byte_identical_seeds_outputs_and_exports(
    proxy: str, http: httpx.Client
) -> None:
    runs = []
    for run in range(10):
        rng = random.Random(run)

        def shuffled(step: int, rng: random.Random = rng) -> list[int]:
            return rng.sample(range(SIBLINGS), SIBLINGS)

        result = asyncio.run(
            agent(proxy, http, "content", shuffled, lambda rng=rng: rng.random() * 0.005)
        )
        runs.append((orjson.dumps(result[0]), orjson.dumps(result[1]), stable(result[2])))
    assert len(set(runs)) == 1
    outputs, seeds, export = asyncio.run(
        agent(proxy, http, "content", lambda s: range(SIBLINGS), None)
    )
    assert (orjson.dumps(outputs), orjson.dumps(seeds), stable(export)) == runs[0]
    # the seeds are the documented rule's, and the export is in (content key, occurrence) order
    interactions = export["interactions"]
    keys = [(i["content_key"], i["occurrence"]) for i in interactions]
    assert keys == sorted(keys) and len(keys) == STEPS * SIBLINGS
    for i in interactions:
        assert i["content_key"] == content_key("/v1/chat/completions", i["request"])
        assert i["seed"] == content_seeds("agent", i["content_key"], i["occurrence"], 1)[0]
        assert i["interaction_id"] == f"c{i['content_key'][:16]}.{i['occurrence']}"
    assert sorted(i["request_index"] for i in interactions) == list(range(STEPS * SIBLINGS))


def test_in_arrival_mode_the_same_agent_depends_on_the_arrival_order(
    proxy: str, http: httpx.Client
) -> None:
    forward = asyncio.run(agent(proxy, http, None, lambda s: range(SIBLINGS), None))
    backward = asyncio.run(agent(proxy, http, None, lambda s: range(SIBLINGS - 1, -1, -1), None))
    assert forward[1][0] == [derive_seed("agent", k) for k in range(SIBLINGS)]
    assert backward[1][0] == [derive_seed("agent", k) for k in range(SIBLINGS - 1, -1, -1)]
    assert forward[0] != backward[0]
    assert stable(forward[2]) != stable(backward[2])
    keyed = [
        asyncio.run(agent(proxy, http, "content", o, None))
        for o in (lambda s: range(SIBLINGS), lambda s: range(SIBLINGS - 1, -1, -1))
    ]
    assert keyed[0][:2] == keyed[1][:2] and stable(keyed[0][2]) == stable(keyed[1][2])


def test_repeats_retries_and_pins_in_content_mode(
    fake: Fake, start_proxy: Callable[..., str]
) -> None:
    proxy = start_proxy([fake.url], index_by="content")  # the default for new sessions
    body = ask(0, 0, "")
    key = content_key("/v1/chat/completions", body)
    with httpx.Client(base_url=f"{proxy}/sessions/c/v1", timeout=30) as c:
        first = c.post("/chat/completions", json=body)
        retry = c.post("/chat/completions", json=body, headers={"x-stainless-retry-count": "1"})
        repeat = c.post("/chat/completions", json=body)
        pinned = c.post("/chat/completions", json=body, headers={"x-request-index": "7"})
        seeded = c.post("/chat/completions", json={**body, "seed": 5})
    seeds = [int(r.headers["x-seedproxy-seed"]) for r in (first, retry, repeat, pinned, seeded)]
    assert seeds == [
        content_seeds("c", key, 0, 1)[0],
        content_seeds("c", key, 0, 1)[0],
        content_seeds("c", key, 1, 1)[0],
        derive_seed("c", 7),
        5,
    ]
    assert [r.headers["x-seedproxy-request-index"] for r in (first, retry, repeat, pinned)] == [
        "0",
        "0",
        "1",
        "7",
    ]
    with httpx.Client(base_url=proxy) as admin:
        session = admin.get("/sessions/c").json()
        trajectory = admin.get("/sessions/c/trajectory").json()["interactions"]
    assert session["index_by"] == "content" and session["interactions"] == 4
    assert [i["interaction_id"] for i in trajectory] == [
        "i7.p0",
        f"c{key[:16]}.0",
        f"c{key[:16]}.1",
        f"c{key[:16]}.2",
    ]
