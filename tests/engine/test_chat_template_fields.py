"""The engine's own chat route (what the proxy forwards to with token-in-token-out off)
hands the template what SGLang's chat route does: ``continue_final_message``,
``add_generation_prompt: false``, ``chat_template_kwargs`` and text parts flattened for a
string template (SmolLM2's). Checked id for id against ``apply_chat_template``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from seedproxy.engine import RunningEngine
from tests.helpers.images import png_url

pytestmark = pytest.mark.engine

PREFILL = [{"role": "user", "content": "Name a colour."},
           {"role": "assistant", "content": "The colour is"}]


@pytest.fixture(scope="module")
def tok() -> Any:
    from seedproxy.engine.testing import tiny_tokenizer

    return tiny_tokenizer()


def rendered(tok: Any, messages: list[dict[str, Any]], **kwargs: Any) -> list[int]:
    text = tok.apply_chat_template(messages, tokenize=False, **kwargs)
    return list(tok.encode(text, add_special_tokens=False))


def prompt_of(client: httpx.Client, **body: Any) -> list[int]:
    reply = client.post("/v1/chat/completions",
                        json={"max_tokens": 2, "return_prompt_token_ids": True, **body})
    assert reply.status_code == 200, reply.text
    ids: list[int] = reply.json()["choices"][0]["prompt_token_ids"]
    return ids


def test_continue_final_message_leaves_the_assistant_message_open(
        client: httpx.Client, tok: Any) -> None:
    got = prompt_of(client, messages=PREFILL, continue_final_message=True,
                    add_generation_prompt=False)
    assert got == rendered(tok, PREFILL, continue_final_message=True)
    assert tok.decode(got).endswith("assistant\nThe colour is")
    closed = prompt_of(client, messages=PREFILL)
    assert closed == rendered(tok, PREFILL, add_generation_prompt=True) != got


def test_add_generation_prompt_false_renders_no_assistant_header(
        client: httpx.Client, tok: Any) -> None:
    messages = PREFILL[:1]
    got = prompt_of(client, messages=messages, add_generation_prompt=False)
    assert got == rendered(tok, messages, add_generation_prompt=False)
    assert got != rendered(tok, messages, add_generation_prompt=True)


@pytest.mark.parametrize("body", [
    {"messages": PREFILL[:1], "continue_final_message": True},
    {"messages": PREFILL, "continue_final_message": True, "add_generation_prompt": True},
    {"messages": PREFILL, "continue_final_message": "yes"},
    {"messages": PREFILL, "chat_template_kwargs": {"tools": []}},
    {"messages": PREFILL, "chat_template_kwargs": ["x"]},
])
def test_a_bad_field_is_a_400_naming_it(client: httpx.Client, body: dict[str, Any]) -> None:
    reply = client.post("/v1/chat/completions", json={"max_tokens": 2, **body})
    assert reply.status_code == 400, reply.text
    field = "chat_template_kwargs" if "chat_template_kwargs" in body else "continue_final_message"
    assert field in reply.text


def test_text_parts_are_joined_with_a_space_as_sglang_does(
        client: httpx.Client, tok: Any) -> None:
    parts = [{"type": "text", "text": "Hello"}, {"type": "text", "text": "world"}]
    got = prompt_of(client, messages=[{"role": "user", "content": parts}])
    assert got == rendered(tok, [{"role": "user", "content": "Hello world"}],
                           add_generation_prompt=True)


def test_an_image_part_is_a_400_saying_so(client: httpx.Client) -> None:
    image = {"type": "image_url", "image_url": {"url": png_url()}}
    reply = client.post("/v1/chat/completions", json={
        "max_tokens": 2, "messages": [{"role": "user", "content": [image]}]})
    assert reply.status_code == 400
    assert "image_url" in reply.text and "text only" in reply.text


@pytest.fixture
def passthrough(engine: RunningEngine, start_proxy: Callable[..., str]
                ) -> Iterator[httpx.Client]:
    base = start_proxy([engine.url], token_in_token_out=False)
    with httpx.Client(base_url=base, timeout=60) as http:
        yield http


def test_through_the_proxy_a_prefill_is_continued_and_recorded_as_rendered(
        passthrough: httpx.Client, tok: Any) -> None:
    reply = passthrough.post("/sessions/pre/v1/chat/completions", json={
        "model": "m", "messages": PREFILL, "max_tokens": 3, "temperature": 0,
        "continue_final_message": True, "add_generation_prompt": False})
    assert reply.status_code == 200, reply.text
    (turn,) = passthrough.get("/sessions/pre/trajectory").json()["interactions"]
    assert turn["prompt_token_ids"] == rendered(tok, PREFILL, continue_final_message=True)
    assert turn["request"]["continue_final_message"] is True
    content = reply.json()["choices"][0]["message"]["content"]
    assert tok.decode(turn["completion_token_ids"], skip_special_tokens=True) == content
