"""The vLLM backend against a server that behaves like vLLM: seeds on every OpenAI
route, token ids captured from ``return_token_ids`` and kept out of the client's body."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from seedproxy import derive_seed
from tests.helpers.fake_compat import CompatSwitches, create_fake_vllm
from tests.helpers.fake_sglang import chat_prompt, detok, logprob_of, tokenize, tokens_for
from tests.helpers.servers import ServerThread

MSG = [{"role": "user", "content": "hello"}]


@pytest.fixture
def vllm() -> Iterator[tuple[str, CompatSwitches]]:
    switches = CompatSwitches()
    with ServerThread(create_fake_vllm(switches)) as server:
        yield server.url, switches


@pytest.fixture
def proxy(vllm: tuple[str, CompatSwitches], start_proxy: Any) -> str:
    return start_proxy([vllm[0]], backend="vllm")  # type: ignore[no-any-return]


def sdk(proxy: str, session: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{proxy}/sessions/{session}/v1", api_key="x", max_retries=0)


def only_interaction(proxy: str, session: str) -> dict[str, Any]:
    (interaction,) = httpx.get(f"{proxy}/sessions/{session}/trajectory").json()["interactions"]
    return interaction  # type: ignore[no-any-return]


@pytest.mark.parametrize("stream", [False, True])
def test_chat_is_seeded_and_its_token_ids_are_captured(
    proxy: str, vllm: tuple[str, CompatSwitches], stream: bool
) -> None:
    c = sdk(proxy, "v-1")
    if stream:
        chunks = list(c.chat.completions.create(model="m", messages=MSG, max_tokens=5, stream=True))
        dumped = [ch.model_dump() for ch in chunks]
        assert all(
            "token_ids" not in (ch.get("choices") or [{}])[0] for ch in dumped if ch["choices"]
        )
        assert all(ch.get("prompt_token_ids") is None for ch in dumped)
        assert all(ch.choices[0].logprobs is None for ch in chunks if ch.choices)
    else:
        raw = c.chat.completions.with_raw_response.create(model="m", messages=MSG, max_tokens=5)
        body = raw.http_response.json()
        assert "prompt_token_ids" not in body
        assert "token_ids" not in body["choices"][0]
        assert body["choices"][0]["logprobs"] is None
        assert raw.headers["x-seedproxy-seed"] == str(derive_seed("v-1", 0))
    sent = vllm[1].received[0]
    seed = derive_seed("v-1", 0)
    assert sent["seed"] == seed
    assert sent["return_token_ids"] is True
    prompt = tokenize(chat_prompt(MSG))
    expected = tokens_for(prompt, seed, 1.0, 5)
    interaction = only_interaction(proxy, "v-1")
    assert interaction["prompt_token_ids"] == prompt
    assert interaction["completion_token_ids"] == expected
    assert interaction["logprobs"] == pytest.approx([logprob_of(t) for t in expected])
    assert interaction["finish_reason"] == "length"


@pytest.mark.parametrize("stream", [False, True])
def test_completions_capture_per_choice_ids(
    proxy: str, vllm: tuple[str, CompatSwitches], stream: bool
) -> None:
    c = sdk(proxy, "v-2")
    if stream:
        text = "".join(
            ch.choices[0].text
            for ch in c.completions.create(model="m", prompt="abc", max_tokens=4, stream=True)
            if ch.choices
        )
    else:
        text = c.completions.create(model="m", prompt="abc", max_tokens=4).choices[0].text
    seed = derive_seed("v-2", 0)
    expected = tokens_for(tokenize("abc"), seed, 1.0, 4)
    interaction = only_interaction(proxy, "v-2")
    assert interaction["prompt_token_ids"] == tokenize("abc")
    assert interaction["completion_token_ids"] == expected
    assert text == detok(expected)


def test_ids_the_client_asked_for_stay_in_its_body(proxy: str) -> None:
    raw = sdk(proxy, "v-3").chat.completions.with_raw_response.create(
        model="m", messages=MSG, max_tokens=3, extra_body={"return_token_ids": True}
    )
    body = raw.http_response.json()
    assert body["prompt_token_ids"] == tokenize(chat_prompt(MSG))
    assert body["choices"][0]["token_ids"] == only_interaction(proxy, "v-3")["completion_token_ids"]


def test_responses_are_seeded_by_vllm_itself(proxy: str, vllm: tuple[str, CompatSwitches]) -> None:
    c = sdk(proxy, "v-4")
    first = c.responses.with_raw_response.create(model="m", input="hi", max_output_tokens=4)
    second = c.responses.with_raw_response.create(model="m", input="hi", max_output_tokens=4)
    assert [b["seed"] for b in vllm[1].received] == [derive_seed("v-4", 0), derive_seed("v-4", 1)]
    assert first.headers["x-seedproxy-seed"] == str(derive_seed("v-4", 0))
    # A rerun of the identity replays the same seeds, so the same text.
    made = httpx.post(f"{proxy}/sessions", json={"identity": "v-4"}).json()["sessions"][0]
    rerun = openai.OpenAI(base_url=made["base_url"], api_key="x", max_retries=0)
    again = rerun.responses.create(model="m", input="hi", max_output_tokens=4)
    assert again.output_text == first.parse().output_text
    assert second.parse().output_text != first.parse().output_text
