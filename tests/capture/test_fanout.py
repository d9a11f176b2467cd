"""n > 1: one upstream request per choice with the contract's per-choice seeds,
merged in index order into one answer and ONE recorded interaction."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import openai
import orjson
import pytest

from tests.conftest import Fake

MSG = [{"role": "user", "content": "hello"}]
# choice_seeds("17:3", 0, 4): seed("17:3", 0), then seed("17:3:0", 1..3)
SEEDS = [1152644103, 1700040817, 1810570516, 1143252661]


def sdk(proxy: str, session: str = "17:3") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{proxy}/sessions/{session}/v1", api_key="x", max_retries=0)


def test_chat_n4_gives_four_distinct_choices_with_the_contract_seeds(
    proxy: str, fake: Fake, http: httpx.Client
) -> None:
    raw = sdk(proxy).chat.completions.with_raw_response.create(model="m", messages=MSG, n=4)
    answer = raw.parse()
    assert raw.headers["x-seedproxy-seed"] == ",".join(map(str, SEEDS))
    assert raw.headers["x-seedproxy-request-index"] == "0"
    assert sorted(b["seed"] for b in fake.received) == sorted(SEEDS)
    assert all("n" not in b for b in fake.received)
    assert [c.index for c in answer.choices] == [0, 1, 2, 3]
    texts = [c.message.content for c in answer.choices]
    assert len(set(texts)) == 4
    # choice j is what a single request with seed SEEDS[j] gives
    single = sdk(proxy, "other").chat.completions.create(model="m", messages=MSG, seed=SEEDS[2])
    assert texts[2] == single.choices[0].message.content
    assert answer.usage is not None
    assert (answer.usage.prompt_tokens, answer.usage.completion_tokens) == (
        len("<user>hello<assistant>"),
        32,
    )
    assert answer.usage.total_tokens == answer.usage.prompt_tokens + 32
    trajectory = http.get("/sessions/17:3/trajectory").json()["interactions"]
    assert len(trajectory) == 1
    record = trajectory[0]
    assert record["seed"] == SEEDS
    assert len(record["completion_token_ids"]) == 4 and all(
        len(t) == 8 for t in record["completion_token_ids"]
    )
    assert len({tuple(t) for t in record["completion_token_ids"]}) == 4
    assert [len(lp) for lp in record["logprobs"]] == [8] * 4
    assert record["finish_reason"] == ["length"] * 4
    assert "response_token_ids" not in str(record["response"])
    assert http.get("/sessions/17:3").json()["next_index"] == 1


def test_chat_n4_streaming_interleaves_choices_with_their_index(
    proxy: str, fake: Fake, http: httpx.Client
) -> None:
    whole = sdk(proxy).chat.completions.create(model="m", messages=MSG, n=4)
    http.post("/sessions", json={"session_id": "17:3-s", "identity": "17:3"})
    # Each of the 4 upstream streams sends its first event, then waits for the others:
    # the merged stream must interleave them (by construction, not by timing).
    fake.switches.stream_barrier = threading.Barrier(4)
    stream = sdk(proxy, "17:3-s").chat.completions.create(
        model="m", messages=MSG, n=4, stream=True, stream_options={"include_usage": True}
    )
    texts: dict[int, str] = {}
    order = []
    usage = None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            order.append(choice.index)
            texts[choice.index] = texts.get(choice.index, "") + (choice.delta.content or "")
    assert [texts[i] for i in range(4)] == [c.message.content for c in whole.choices]
    assert order != sorted(order)  # interleaved, not one choice after another
    assert usage is not None and usage.completion_tokens == 32
    record = http.get("/sessions/17:3-s/trajectory").json()["interactions"][0]
    assert record["seed"] == SEEDS
    assert [c["text"].strip() for c in record["response"]["choices"]] == [
        texts[i] for i in range(4)
    ]
    assert len({tuple(t) for t in record["completion_token_ids"]}) == 4


@pytest.mark.parametrize("stream", [False, True])
def test_completions_n3_on_the_second_request(
    proxy: str, fake: Fake, http: httpx.Client, stream: bool
) -> None:
    c = sdk(proxy)
    c.completions.create(model="m", prompt="abc")
    raw = c.completions.with_raw_response.create(model="m", prompt="abc", n=3, stream=stream)
    assert raw.headers["x-seedproxy-seed"] == "817236710,2045651181,372569383"
    if stream:
        texts: dict[int, str] = {}
        for chunk in raw.parse():
            for ch in chunk.choices:
                texts[ch.index] = texts.get(ch.index, "") + ch.text
    else:
        texts = {ch.index: ch.text for ch in raw.parse().choices}
    assert sorted(texts) == [0, 1, 2] and len(set(texts.values())) == 3
    record = http.get("/sessions/17:3/trajectory").json()["interactions"][1]
    assert record["seed"] == [817236710, 2045651181, 372569383]
    assert all(len(ids) == 8 for ids in record["completion_token_ids"])


@pytest.mark.parametrize("stream", [False, True])
def test_generate_n2_fans_out_with_sampling_seeds(
    proxy: str, fake: Fake, http: httpx.Client, stream: bool
) -> None:
    body = {"text": "hi", "sampling_params": {"max_new_tokens": 4, "n": 2}, "stream": stream}
    r = http.post("/sessions/17:3/generate", json=body)
    assert r.status_code == 200, r.text
    assert r.headers["x-seedproxy-seed"] == f"{SEEDS[0]},{SEEDS[1]}"
    assert sorted(b["sampling_params"]["sampling_seed"] for b in fake.received) == sorted(SEEDS[:2])
    assert all("n" not in b["sampling_params"] for b in fake.received)
    if stream:
        items: dict[int, Any] = {}
        for line in r.text.splitlines():
            if line.startswith("data: {"):
                item = orjson.loads(line[6:])
                items[item["index"]] = item
        assert r.text.count("[DONE]") == 1
    else:
        items = {item["index"]: item for item in r.json()}
    assert sorted(items) == [0, 1]
    assert items[0]["output_ids"] != items[1]["output_ids"]
    assert "output_token_logprobs" not in items[0]["meta_info"]
    record = http.get("/sessions/17:3/trajectory").json()["interactions"][0]
    assert record["completion_token_ids"] == [items[0]["output_ids"], items[1]["output_ids"]]
    assert [len(lp) for lp in record["logprobs"]] == [4, 4]


def test_one_failing_choice_fails_the_request_and_keeps_its_index(
    proxy: str, fake: Fake, http: httpx.Client
) -> None:
    fake.switches.fail_next = 1
    with pytest.raises(openai.InternalServerError):
        sdk(proxy, "fan-fail").chat.completions.create(model="m", messages=MSG, n=3)
    state = http.get("/sessions/fan-fail").json()
    assert (state["next_index"], state["interactions"]) == (1, 1)


def test_a_clients_own_seed_with_n_gives_distinct_choices_from_documented_seeds(
    proxy: str, fake: Fake, http: httpx.Client
) -> None:
    """OpenAI and vLLM accept ``seed`` with ``n > 1``: choice 0 gets the client's seed,
    choice i gets seed(str(client_seed), i) (client_choice_seeds, pinned in test_seeds)."""
    raw = sdk(proxy, "own-seed").chat.completions.with_raw_response.create(
        model="m", messages=MSG, n=3, seed=5
    )
    assert raw.headers["x-seedproxy-seed"] == "5,629698337,58991464"
    assert sorted(b["seed"] for b in fake.received) == sorted([5, 629698337, 58991464])
    texts = [c.message.content for c in raw.parse().choices]
    assert len(set(texts)) == 3
    # choice 0 is what the same request with n=1 gives
    single = sdk(proxy, "own-seed").chat.completions.create(model="m", messages=MSG, seed=5)
    assert single.choices[0].message.content == texts[0]
    record = http.get("/sessions/own-seed/trajectory").json()["interactions"][0]
    assert record["seed"] == [5, 629698337, 58991464]
