"""SDK retries: a real openai client retries a 503; the retry reuses the failed
attempt's index and seed and replaces its interaction (no orphan)."""

from __future__ import annotations

import httpx
import openai

from seedproxy import derive_seed
from tests.conftest import Fake

MSG = [{"role": "user", "content": "hello"}]


def sdk(proxy: str, session: str, retries: int = 2) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{proxy}/sessions/{session}/v1", api_key="x", max_retries=retries
    )


def test_an_sdk_retry_after_a_503_keeps_the_index_and_leaves_no_orphan(
    proxy: str, fake: Fake, http: httpx.Client
) -> None:
    fake.switches.fail_next, fake.switches.fail_status = 1, 503
    raw = sdk(proxy, "retry").chat.completions.with_raw_response.create(model="m", messages=MSG)
    assert raw.retries_taken == 1
    assert len(fake.received) == 2
    assert [b["seed"] for b in fake.received] == [derive_seed("retry", 0)] * 2
    assert raw.headers["x-seedproxy-request-index"] == "0"
    trajectory = http.get("/sessions/retry/trajectory").json()["interactions"]
    assert [(i["interaction_id"], i["request_index"], i["status"]) for i in trajectory] == [
        ("i0", 0, 200)
    ]
    assert (
        trajectory[0]["response"]["choices"][0]["message"]["content"]
        == raw.parse().choices[0].message.content
    )
    following = sdk(proxy, "retry").chat.completions.with_raw_response.create(
        model="m", messages=MSG
    )
    assert following.headers["x-seedproxy-request-index"] == "1"
    state = http.get("/sessions/retry").json()
    assert (state["next_index"], state["interactions"]) == (2, 2)


def test_a_retried_stream_and_a_retried_fanout_replace_their_interaction(
    proxy: str, fake: Fake, http: httpx.Client
) -> None:
    c = sdk(proxy, "retry-2")
    fake.switches.fail_next = 1
    text = "".join(
        ch.choices[0].delta.content or ""
        for ch in c.chat.completions.create(model="m", messages=MSG, stream=True)
        if ch.choices
    )
    fake.switches.fail_next = 2
    many = c.chat.completions.create(model="m", messages=MSG, n=3)
    assert text and len(many.choices) == 3
    interactions = http.get("/sessions/retry-2/trajectory").json()["interactions"]
    assert [(i["request_index"], i["status"]) for i in interactions] == [(0, 200), (1, 200)]
    assert interactions[1]["seed"] == [
        derive_seed("retry-2", 1),
        derive_seed("retry-2:1", 1),
        derive_seed("retry-2:1", 2),
    ]


def test_the_same_body_without_the_retry_header_takes_a_new_index(
    proxy: str, http: httpx.Client
) -> None:
    c = sdk(proxy, "no-retry", retries=0)
    first = c.chat.completions.with_raw_response.create(model="m", messages=MSG)
    second = c.chat.completions.with_raw_response.create(model="m", messages=MSG)
    assert [
        first.headers["x-seedproxy-request-index"],
        second.headers["x-seedproxy-request-index"],
    ] == ["0", "1"]
