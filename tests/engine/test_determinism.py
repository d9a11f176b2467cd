"""Same seed, same everything; different seeds, different samples; over real HTTP."""

from __future__ import annotations

import concurrent.futures as cf
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.engine

MSG = [{"role": "user", "content": "Tell me a story about a dragon."}]


def gen(client: httpx.Client, **sp: Any) -> dict[str, Any]:
    body = {"text": "Once upon a time", "return_logprob": True,
            "sampling_params": {"max_new_tokens": 16, "temperature": 1.0, **sp}}
    r = client.post("/generate", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def lps(res: dict[str, Any]) -> list[float]:
    return [t[0] for t in res["meta_info"]["output_token_logprobs"]]


def test_generate_same_seed_identical(client: httpx.Client) -> None:
    a, b = gen(client, sampling_seed=7), gen(client, sampling_seed=7)
    assert a["output_ids"] == b["output_ids"] and a["text"] == b["text"]
    assert lps(a) == lps(b)
    assert [t[1] for t in a["meta_info"]["output_token_logprobs"]] == a["output_ids"]


def test_generate_different_seeds_differ(client: httpx.Client) -> None:
    outs = {tuple(gen(client, sampling_seed=s)["output_ids"]) for s in (1, 2, 3)}
    assert len(outs) == 3


def test_no_seed_is_seed_42(client: httpx.Client) -> None:
    assert gen(client)["output_ids"] == gen(client, sampling_seed=42)["output_ids"]


def test_temperature_zero_ignores_seed(client: httpx.Client) -> None:
    a = gen(client, temperature=0, sampling_seed=1)
    b = gen(client, temperature=0, sampling_seed=2)
    assert a["output_ids"] == b["output_ids"] and lps(a) == lps(b)


def test_chat_same_seed_identical(oai: Any) -> None:
    def call(seed: int) -> Any:
        return oai.chat.completions.create(model="x", messages=MSG, max_tokens=12, seed=seed,
                                           temperature=1.0, logprobs=True, top_logprobs=3)
    a, b, c = call(5), call(5), call(6)
    la = [t.logprob for t in a.choices[0].logprobs.content]
    assert a.choices[0].message.content == b.choices[0].message.content
    assert la == [t.logprob for t in b.choices[0].logprobs.content]
    assert len(la) == a.usage.completion_tokens == 12
    assert a.choices[0].message.content != c.choices[0].message.content


def test_completions_same_seed_identical(oai: Any) -> None:
    def call(seed: int) -> Any:
        return oai.completions.create(model="x", prompt="The weather today", max_tokens=12,
                                      seed=seed, logprobs=2,
                                      extra_body={"return_token_ids": True})
    a, b, c = call(9), call(9), call(10)
    assert a.choices[0].text == b.choices[0].text
    assert a.choices[0].logprobs.token_logprobs == b.choices[0].logprobs.token_logprobs
    assert a.choices[0].model_extra["token_ids"] == b.choices[0].model_extra["token_ids"]
    assert a.choices[0].model_extra["token_ids"] != c.choices[0].model_extra["token_ids"]


def test_concurrent_requests_match_alone(client: httpx.Client, engine: Any) -> None:
    seeds = list(range(100, 108))
    alone = {s: gen(client, sampling_seed=s) for s in seeds}

    def one(seed: int) -> dict[str, Any]:
        with httpx.Client(base_url=engine.url, timeout=60) as c:
            return gen(c, sampling_seed=seed)

    with cf.ThreadPoolExecutor(8) as pool:
        together = dict(zip(seeds, pool.map(one, seeds), strict=True))
    for s in seeds:
        assert together[s]["output_ids"] == alone[s]["output_ids"]
        assert lps(together[s]) == lps(alone[s])


def test_prefix_resubmission_continues_identically(client: httpx.Client) -> None:
    prompt = client.post("/generate", json={
        "text": "A long time ago", "sampling_params": {"max_new_tokens": 0}}).json()
    ids = [6004] * 3 + [1234, 567]
    body = {"input_ids": ids, "return_logprob": True,
            "sampling_params": {"max_new_tokens": 20, "sampling_seed": 3}}
    full = client.post("/generate", json=body).json()
    assert prompt["output_ids"] == []
    for k in (1, 7, 19):
        body2 = {**body, "input_ids": ids + full["output_ids"][:k],
                 "sampling_params": {"max_new_tokens": 20 - k, "sampling_seed": 3}}
        # an unrelated request in between must not matter (it evicts the cached prefix)
        gen(client, sampling_seed=99)
        rest = client.post("/generate", json=body2).json()
        assert rest["output_ids"] == full["output_ids"][k:]
        assert lps(rest) == lps(full)[k:]


def test_cached_prefix_is_bit_identical(client: httpx.Client) -> None:
    body = {"input_ids": [11, 22, 33, 44], "return_logprob": True,
            "sampling_params": {"max_new_tokens": 10, "sampling_seed": 8}}
    gen(client, sampling_seed=1)
    cold = client.post("/generate", json=body).json()
    warm = client.post("/generate", json=body).json()
    assert warm["meta_info"]["cached_tokens"] == 3
    assert warm["output_ids"] == cold["output_ids"] and lps(warm) == lps(cold)


def test_chat_n3_identical_choices(oai: Any) -> None:
    r = oai.chat.completions.create(model="x", messages=MSG, max_tokens=8, n=3, seed=11)
    texts = [c.message.content for c in r.choices]
    assert len(texts) == 3 and len(set(texts)) == 1
    assert [c.index for c in r.choices] == [0, 1, 2]
    assert r.usage.completion_tokens == 24
