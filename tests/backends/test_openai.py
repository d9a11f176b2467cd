"""The generic OpenAI backend against a strict OpenAI-compatible server: only OpenAI's
fields go out (the seed as ``seed``), the upstream key is sent, and logprobs are what
gets captured."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from seedproxy import derive_seed
from seedproxy.commands.cli import main
from tests.helpers.fake_compat import CompatSwitches, create_fake_openai
from tests.helpers.fake_sglang import chat_prompt, logprob_of, tokenize, tokens_for
from tests.helpers.servers import ServerThread

MSG = [{"role": "user", "content": "hello"}]


@pytest.fixture
def upstream() -> Iterator[tuple[str, CompatSwitches]]:
    switches = CompatSwitches(api_key="sk-upstream")
    with ServerThread(create_fake_openai(switches)) as server:
        yield server.url, switches


@pytest.fixture
def proxy(upstream: tuple[str, CompatSwitches], start_proxy: Any) -> str:
    return start_proxy([upstream[0]], backend="openai", upstream_api_key="sk-upstream")  # type: ignore[no-any-return]


def sdk(proxy: str, session: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{proxy}/sessions/{session}/v1", api_key="x", max_retries=0)


def only_interaction(proxy: str, session: str) -> dict[str, Any]:
    (interaction,) = httpx.get(f"{proxy}/sessions/{session}/trajectory").json()["interactions"]
    return interaction  # type: ignore[no-any-return]


@pytest.mark.parametrize("stream", [False, True])
def test_chat_sends_only_openai_fields_and_captures_logprobs(
    proxy: str, upstream: tuple[str, CompatSwitches], stream: bool
) -> None:
    c = sdk(proxy, "o-1")
    if stream:
        chunks = list(c.chat.completions.create(model="m", messages=MSG, max_tokens=4, stream=True))
        assert all(ch.choices[0].logprobs is None for ch in chunks if ch.choices)
    else:
        reply = c.chat.completions.create(model="m", messages=MSG, max_tokens=4)
        assert reply.choices[0].logprobs is None
    sent, headers = upstream[1].received[0], upstream[1].headers[0]
    seed = derive_seed("o-1", 0)
    assert sent["seed"] == seed
    assert headers["authorization"] == "Bearer sk-upstream"
    expected = tokens_for(tokenize(chat_prompt(MSG)), seed, 1.0, 4)
    interaction = only_interaction(proxy, "o-1")
    assert interaction["status"] == 200
    assert interaction["logprobs"] == pytest.approx([logprob_of(t) for t in expected])
    assert interaction["completion_token_ids"] == []
    assert interaction["prompt_token_ids"] == []


def test_token_ids_are_read_from_token_id_spelled_logprobs(
    proxy: str, upstream: tuple[str, CompatSwitches]
) -> None:
    upstream[1].tokens_as_ids = True
    sdk(proxy, "o-2").completions.create(model="m", prompt="abc", max_tokens=3)
    expected = tokens_for(tokenize("abc"), derive_seed("o-2", 0), 1.0, 3)
    assert only_interaction(proxy, "o-2")["completion_token_ids"] == expected


def test_responses_are_seeded_through_the_chat_route(
    proxy: str, upstream: tuple[str, CompatSwitches]
) -> None:
    reply = sdk(proxy, "o-3").responses.create(model="m", input="hi", max_output_tokens=3)
    assert reply.output_text
    sent = upstream[1].received[0]
    assert sent["messages"] == [{"role": "user", "content": "hi"}]
    assert sent["seed"] == derive_seed("o-3", 0)


def test_an_unknown_backend_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--backend", "nope", "--upstream", "http://127.0.0.1:9"]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err
        == "seedproxy: error: backend: unknown backend 'nope'; choose one of openai, sglang, vllm"
    )


def test_every_backend_name_has_its_dialect_class() -> None:
    from seedproxy.dialects import BACKENDS
    from seedproxy.settings import BACKEND_NAMES

    assert sorted(BACKENDS) == sorted(BACKEND_NAMES)
    assert all(cls.name == name for name, cls in BACKENDS.items())
