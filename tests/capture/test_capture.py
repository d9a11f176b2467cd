"""Capture: token ids and logprobs land in the trajectory for chat, completions and
/generate, streamed or not, and stay out of the client's body unless it asked; what
it asked for comes back exactly as the upstream sent it."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import orjson
import pytest

from seedproxy import derive_seed
from tests.conftest import Fake
from tests.helpers.fake_sglang import logprob_of, tokenize

MSG = [{"role": "user", "content": "hello"}]
CHAT_PROMPT = tokenize("<user>hello<assistant>")


def sdk(proxy: str, session: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{proxy}/sessions/{session}/v1", api_key="x", max_retries=0)


def last(http: httpx.Client, session: str) -> dict[str, Any]:
    return http.get(f"/sessions/{session}/trajectory").json()["interactions"][-1]


def assert_captured(record: dict[str, Any], prompt: list[int], count: int) -> None:
    assert record["prompt_token_ids"] == prompt
    ids = record["completion_token_ids"]
    assert len(ids) == count and all(isinstance(t, int) for t in ids)
    assert record["logprobs"] == pytest.approx([logprob_of(t) for t in ids], abs=1e-6)
    assert record["finish_reason"] == "length"


@pytest.mark.parametrize("stream", [False, True])
def test_chat_capture_without_the_client_asking(
    proxy: str, http: httpx.Client, stream: bool
) -> None:
    r = http.post("/sessions/cc/v1/chat/completions", json={"messages": MSG, "stream": stream})
    assert r.status_code == 200
    for word in ("token_ids", 'logprob":{', "sglext", "input_ids"):
        assert word not in r.text
    assert_captured(last(http, "cc"), CHAT_PROMPT, 8)


@pytest.mark.parametrize("stream", [False, True])
def test_completions_capture_without_the_client_asking(
    proxy: str, http: httpx.Client, stream: bool
) -> None:
    r = http.post(
        "/sessions/cp/v1/completions", json={"prompt": "abc", "stream": stream, "max_tokens": 5}
    )
    assert r.status_code == 200
    assert "token_ids" not in r.text and "token_logprobs" not in r.text
    assert_captured(last(http, "cp"), tokenize("abc"), 5)


@pytest.mark.parametrize("stream", [False, True])
def test_generate_capture_without_the_client_asking(
    proxy: str, http: httpx.Client, stream: bool
) -> None:
    body = {"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 4}, "stream": stream}
    r = http.post("/sessions/cg/generate", json=body)
    assert r.status_code == 200
    assert "output_token_logprobs" not in r.text
    assert_captured(last(http, "cg"), [5, 6, 7], 4)


def direct(fake: Fake, path: str, body: dict[str, Any]) -> Any:
    return httpx.post(fake.url + path, json=body, timeout=10).json()


def test_chat_logprobs_asked_for_are_exactly_the_upstreams(
    proxy: str, fake: Fake, http: httpx.Client
) -> None:
    raw = sdk(proxy, "lp").chat.completions.with_raw_response.create(
        model="m", messages=MSG, logprobs=True, top_logprobs=2
    )
    expected = direct(
        fake,
        "/v1/chat/completions",
        {"messages": MSG, "logprobs": True, "top_logprobs": 2, "seed": derive_seed("lp", 0)},
    )
    assert raw.parse().choices[0].logprobs is not None
    assert orjson.loads(raw.content)["choices"] == expected["choices"]
    assert_captured(last(http, "lp"), CHAT_PROMPT, 8)


def test_completion_logprobs_and_token_ids_asked_for_come_back(
    proxy: str, fake: Fake, http: httpx.Client
) -> None:
    r = http.post(
        "/sessions/lpc/v1/completions",
        json={"prompt": "abc", "logprobs": 0, "return_token_ids": True},
    )
    expected = direct(
        fake,
        "/v1/completions",
        {"prompt": "abc", "logprobs": 0, "return_token_ids": True, "seed": derive_seed("lpc", 0)},
    )
    assert r.json()["choices"] == expected["choices"]


def test_streamed_chat_logprobs_asked_for_are_kept_per_chunk(
    proxy: str, fake: Fake, http: httpx.Client
) -> None:
    r = http.post(
        "/sessions/lps/v1/chat/completions",
        json={"messages": MSG, "stream": True, "logprobs": True},
    )
    chunks = [orjson.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: {")]
    shown = [
        c["choices"][0]["logprobs"]["content"][0]["logprob"]
        for c in chunks
        if c["choices"] and c["choices"][0]["logprobs"]
    ]
    record = last(http, "lps")
    assert shown == pytest.approx(record["logprobs"], abs=1e-6) and len(shown) == 8
    assert "sglext" not in r.text


def test_generate_return_logprob_asked_for_is_kept(proxy: str, http: httpx.Client) -> None:
    r = http.post(
        "/sessions/lpg/generate",
        json={"text": "hi", "return_logprob": True, "sampling_params": {"max_new_tokens": 3}},
    )
    meta = r.json()["meta_info"]
    assert [e[1] for e in meta["output_token_logprobs"]] == r.json()["output_ids"]


def test_no_capture_outside_a_session(proxy: str, fake: Fake) -> None:
    r = httpx.post(proxy + "/v1/chat/completions", json={"messages": MSG})
    assert r.status_code == 200
    sent = fake.received[0]
    assert "return_token_ids" not in sent and "logprobs" not in sent
