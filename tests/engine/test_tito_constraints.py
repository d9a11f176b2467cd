"""Structured output and penalties in token-in-token-out mode against the engine (tiny
model): the token-prompt request constrains and penalises exactly as the engine's own
chat route does, token for token."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from seedproxy.engine import RunningEngine
from seedproxy.engine.model import default_gguf_path, gguf_tokenizer_dir
from tests.engine.test_structured import SCHEMA, check_person

pytestmark = pytest.mark.engine

MESSAGES = [{"role": "user", "content": "Describe a person."}]
FORMAT = {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA}}


@pytest.fixture
def tito(engine: RunningEngine, start_proxy: Callable[..., str]) -> str:
    """The engine's own tokenizer and chat template, so prompts match its chat route."""
    return start_proxy([engine.url], token_in_token_out=True,
                       tokenizer=str(gguf_tokenizer_dir(default_gguf_path())))


def through_tito(base: str, session: str, **fields: Any) -> tuple[list[int], list[int], str, int]:
    """(prompt ids, completion ids as sampled, content, seed) of one TITO turn."""
    with httpx.Client(base_url=base, timeout=120) as http:
        reply = http.post(f"/sessions/{session}/v1/chat/completions",
                          json={"model": "m", "messages": MESSAGES, **fields})
        assert reply.status_code == 200, reply.text
        turn = http.get(f"/sessions/{session}/trajectory").json()["interactions"][-1]
    content = reply.json()["choices"][0]["message"]["content"]
    return (turn["prompt_token_ids"], turn["completion_token_ids"], content,
            int(reply.headers["x-seedproxy-seed"]))


def through_chat(engine: RunningEngine, seed: int, **fields: Any) -> tuple[list[int], list[int]]:
    """(prompt ids, completion ids) of the engine's chat route with ``seed``."""
    reply = httpx.post(f"{engine.url}/v1/chat/completions", timeout=120, json={
        "model": "m", "messages": MESSAGES, "seed": seed, "return_token_ids": True,
        **fields})
    assert reply.status_code == 200, reply.text
    choice = reply.json()["choices"][0]
    return choice["prompt_token_ids"], choice["response_token_ids"]


@pytest.mark.parametrize("fields", [
    {"response_format": FORMAT, "max_tokens": 60},
    {"response_format": {"type": "json_object"}, "max_tokens": 24},
    {"json_schema": json.dumps(SCHEMA), "max_tokens": 60},
    {"regex": "[A-Z][a-z]{1,5}, [0-9]{2}", "max_tokens": 12},
    # Seed 1 over 24 tokens: a regime where each penalty moves the tokens (below).
    {"repetition_penalty": 0.2, "max_tokens": 24, "seed": 1},
    {"repetition_penalty": 1.8, "max_tokens": 24, "seed": 1},
    {"frequency_penalty": 2, "presence_penalty": -0.5, "max_tokens": 24, "seed": 1},
    {"logit_bias": {"42": 6.5, "7": -100}, "max_tokens": 12},
    {"response_format": FORMAT, "repetition_penalty": 1.3, "logit_bias": {"90": 2},
     "max_tokens": 60},
], ids=["json_schema-format", "json_object", "json_schema", "regex", "repetition-0.2",
        "repetition-1.8", "frequency-presence", "logit_bias", "all-together"])
def test_tito_samples_exactly_what_the_engines_chat_route_samples(
        tito: str, engine: RunningEngine, fields: dict[str, Any],
        request: pytest.FixtureRequest) -> None:
    session = f"same-{request.node.callspec.id}"
    prompt, completion, _, seed = through_tito(tito, session, **fields)
    if "seed" in fields:
        assert seed == fields["seed"]  # a request's own seed is kept
    sampling = {k: v for k, v in fields.items() if k != "seed"}
    chat_prompt, chat_completion = through_chat(engine, seed, **sampling)
    assert prompt == chat_prompt
    assert completion == chat_completion


def test_response_format_json_schema_gives_json_that_validates(tito: str) -> None:
    for k in range(3):
        _, completion, content, _ = through_tito(tito, f"json-{k}", response_format=FORMAT,
                                                 max_tokens=60)
        check_person(content)
        assert completion[-1] == 2  # the grammar ends with <|im_end|>, kept as sampled


def test_penalties_and_logit_bias_change_the_tokens(tito: str) -> None:
    plain = through_tito(tito, "p", max_tokens=24, seed=1)[1]  # one seed for all
    for k, fields in enumerate([{"repetition_penalty": 0.2}, {"frequency_penalty": 2},
                                {"frequency_penalty": -2}, {"presence_penalty": 2},
                                {"presence_penalty": -2}, {"logit_bias": {"42": 100}}]):
        changed = through_tito(tito, f"p{k}", max_tokens=24, seed=1, **fields)[1]
        assert changed != plain, fields
    assert changed == [42] * 24


def test_the_responses_api_text_format_is_carried_too(tito: str) -> None:
    openai = pytest.importorskip("openai")
    with openai.OpenAI(base_url=f"{tito}/sessions/resp/v1", api_key="x", max_retries=0,
                       timeout=120) as client:
        reply = client.responses.create(
            model="m", input="Describe a person.", max_output_tokens=60,
            text={"format": {"type": "json_schema", "name": "person", "schema": SCHEMA}})
    check_person(reply.output_text)
