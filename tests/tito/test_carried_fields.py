"""Penalties, logit_bias, grammars, stop_regex and response_format in token-in-token-out
mode: carried to the token-prompt request under each upstream's own names (SGLang's
``/generate`` sampling_params, vLLM's ``/v1/completions``), checked before any work."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

pytest.importorskip("transformers")

from tests.conftest import Fake  # noqa: E402
from tests.helpers.fake_compat import CompatSwitches  # noqa: E402
from tests.tito.test_contract import TOKENIZER, generated, tito  # noqa: E402

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
FORMAT = {"type": "json_schema", "json_schema": {"name": "thing", "schema": SCHEMA}}
HI = [{"role": "user", "content": "hi"}]

CARRIED_TO_SGLANG: list[tuple[dict[str, Any], dict[str, Any]]] = [
    ({"frequency_penalty": 0.5}, {"frequency_penalty": 0.5}),
    ({"presence_penalty": -1}, {"presence_penalty": -1.0}),
    ({"repetition_penalty": 1.2}, {"repetition_penalty": 1.2}),
    ({"logit_bias": {"5": 10, "0017": -2.5}}, {"logit_bias": {"5": 10.0, "17": -2.5}}),
    ({"regex": "a+"}, {"regex": "a+"}),
    ({"ebnf": 'root ::= "a" | "b"'}, {"ebnf": 'root ::= "a" | "b"'}),
    ({"json_schema": '{"type":"string"}'}, {"json_schema": '{"type":"string"}'}),
    ({"json_schema": {"type": "integer"}}, {"json_schema": '{"type": "integer"}'}),
    ({"stop_regex": r"x\d"}, {"stop_regex": [r"x\d"]}),
    ({"stop_regex": ["a+", "b"]}, {"stop_regex": ["a+", "b"]}),
    # SGLang's chat route: json_object is the schema {"type": "object"}, a json_schema
    # response format is json.dumps(its schema).
    ({"response_format": {"type": "json_object"}}, {"json_schema": '{"type": "object"}'}),
    ({"response_format": FORMAT}, {"json_schema": json.dumps(SCHEMA)}),
]

BAD: list[tuple[dict[str, Any], str]] = [
    ({"frequency_penalty": 2.5}, "frequency_penalty"),
    ({"presence_penalty": "1"}, "presence_penalty"),
    ({"presence_penalty": True}, "presence_penalty"),
    ({"repetition_penalty": 0}, "repetition_penalty"),
    ({"repetition_penalty": 2.01}, "repetition_penalty"),
    ({"logit_bias": [1, 2]}, "logit_bias"),
    ({"logit_bias": {"x": 1}}, "logit_bias"),
    ({"logit_bias": {"-1": 1}}, "logit_bias"),
    ({"logit_bias": {"49152": 1}}, "logit_bias"),  # SmolLM2's vocabulary is 49152
    ({"logit_bias": {"9" * 5000: 1}}, "logit_bias"),  # past int()'s digit limit
    ({"logit_bias": {"٥": 1}}, "logit_bias"),  # a digit, not an ASCII one
    ({"logit_bias": {"5": "high"}}, "logit_bias"),
    ({"regex": 5}, "regex"),
    ({"ebnf": ""}, "ebnf"),
    ({"json_schema": "{not json"}, "json_schema"),
    ({"json_schema": 3}, "json_schema"),
    ({"stop_regex": "("}, "stop_regex"),
    ({"stop_regex": [1]}, "stop_regex"),
    ({"regex": "a", "ebnf": 'root ::= "a"'}, "ebnf"),
    ({"regex": "a", "response_format": {"type": "json_object"}}, "response_format"),
    ({"response_format": "json"}, "response_format"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
     "response_format"),
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": SCHEMA}}},
     "response_format"),
    ({"response_format": {"type": "structural_tag", "structures": [{"begin": "<a>"}],
                          "triggers": []}}, "response_format"),
    ({"response_format": {"type": "structural_tag", "structures": [], "triggers": "<a>"}},
     "response_format"),
    ({"response_format": {"type": "regex_tag"}}, "response_format"),
]


@pytest.mark.parametrize(("fields", "sent"), CARRIED_TO_SGLANG)
def test_each_field_reaches_sglang_sampling_params_under_its_name(
        fake: Fake, start_proxy: Callable[..., str], fields: dict[str, Any],
        sent: dict[str, Any]) -> None:
    base = tito(start_proxy, fake)
    fake.switches.script = [[1, 2]]
    reply = httpx.post(f"{base}/sessions/c/v1/chat/completions", timeout=60,
                       json={"model": "m", "messages": HI, **fields})
    assert reply.status_code == 200, reply.text
    [request] = generated(fake)
    params = request["sampling_params"]
    assert {k: params[k] for k in sent} == sent
    carried = {"frequency_penalty", "presence_penalty", "repetition_penalty", "logit_bias",
               "regex", "ebnf", "json_schema", "stop_regex"}
    assert carried & set(params) == set(sent)


def test_a_constraint_with_a_reasoning_parser_leaves_the_reasoning_free(
        fake: Fake, start_proxy: Callable[..., str]) -> None:
    """SGLang's chat route sends ``require_reasoning`` with a reasoning parser, so its
    grammar backend starts the constraint after ``</think>``; /generate needs it said."""
    base = tito(start_proxy, fake)  # --reasoning-parser think
    fake.switches.script = [[1, 2], [1, 2]]
    for extra in ({"response_format": FORMAT}, {}):
        reply = httpx.post(f"{base}/sessions/r/v1/chat/completions", timeout=60,
                           json={"model": "m", "messages": HI, **extra})
        assert reply.status_code == 200, reply.text
    constrained, plain = generated(fake)
    assert constrained["require_reasoning"] is True
    assert "require_reasoning" not in plain
    bare = start_proxy([fake.url], token_in_token_out=True, tokenizer=TOKENIZER)
    fake.switches.script = [[1, 2]]
    reply = httpx.post(f"{bare}/sessions/r/v1/chat/completions", timeout=60,
                       json={"model": "m", "messages": HI, "response_format": FORMAT})
    assert reply.status_code == 200, reply.text
    assert "require_reasoning" not in generated(fake)[-1]


@pytest.mark.parametrize(("fields", "param"), BAD)
def test_a_bad_value_is_a_400_naming_it_that_uses_no_index(
        fake: Fake, start_proxy: Callable[..., str], fields: dict[str, Any],
        param: str) -> None:
    base = tito(start_proxy, fake)
    url = f"{base}/sessions/b/v1/chat/completions"
    reply = httpx.post(url, json={"model": "m", "messages": HI, **fields}, timeout=60)
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error"
    assert generated(fake) == []
    fake.switches.script = [[1, 2]]
    after = httpx.post(url, json={"model": "m", "messages": HI}, timeout=60)
    assert after.headers["x-seedproxy-request-index"] == "0"


def test_neutral_values_are_taken_and_send_nothing_new(
        fake: Fake, start_proxy: Callable[..., str]) -> None:
    base = tito(start_proxy, fake)
    fake.switches.script = [[1, 2]]
    body = {"model": "m", "messages": HI, "tool_choice": "none", "logit_bias": {},
            "response_format": {"type": "text"}, "regex": None, "stop_regex": []}
    reply = httpx.post(f"{base}/sessions/n/v1/chat/completions", json=body, timeout=60)
    assert reply.status_code == 200, reply.text
    params = generated(fake)[0]["sampling_params"]
    assert not {"logit_bias", "regex", "json_schema", "stop_regex"} & set(params)


CARRIED_TO_VLLM: list[tuple[dict[str, Any], dict[str, Any]]] = [
    ({"frequency_penalty": 0.5, "presence_penalty": 1, "repetition_penalty": 1.1,
      "logit_bias": {"7": 3}},
     {"frequency_penalty": 0.5, "presence_penalty": 1.0, "repetition_penalty": 1.1,
      "logit_bias": {"7": 3.0}}),
    ({"regex": "[ab]+"}, {"structured_outputs": {"regex": "[ab]+"}}),
    ({"ebnf": 'root ::= "a"'}, {"structured_outputs": {"grammar": 'root ::= "a"'}}),
    ({"json_schema": {"type": "integer"}},
     {"structured_outputs": {"json": '{"type": "integer"}'}}),
    # vLLM's completions take response_format and map it as its chat route does.
    ({"response_format": {"type": "json_object"}},
     {"response_format": {"type": "json_object"}}),
    ({"response_format": FORMAT}, {"response_format": FORMAT}),
]


@pytest.mark.parametrize(("fields", "sent"), CARRIED_TO_VLLM)
def test_vllm_gets_the_fields_under_its_own_names(
        vllm: tuple[str, CompatSwitches], start_proxy: Callable[..., str],
        fields: dict[str, Any], sent: dict[str, Any]) -> None:
    url, switches = vllm
    base = start_proxy([url], backend="vllm", token_in_token_out=True, tokenizer=TOKENIZER)
    reply = httpx.post(f"{base}/sessions/v/v1/chat/completions", timeout=60,
                       json={"model": "m", "messages": HI, "max_tokens": 3, **fields})
    assert reply.status_code == 200, reply.text
    [request] = [r for r in switches.received if isinstance(r.get("prompt"), list)]
    assert {k: request[k] for k in sent} == sent
    assert not {"regex", "ebnf", "json_schema", "guided_json", "guided_regex"} & set(request)


def test_vllm_refuses_stop_regex_which_it_cannot_carry(
        vllm: tuple[str, CompatSwitches], start_proxy: Callable[..., str]) -> None:
    url, switches = vllm
    base = start_proxy([url], backend="vllm", token_in_token_out=True, tokenizer=TOKENIZER)
    reply = httpx.post(f"{base}/sessions/v/v1/chat/completions", timeout=60,
                       json={"model": "m", "messages": HI, "stop_regex": "a+"})
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "stop_regex"
    assert switches.received == []
    ok = httpx.post(f"{base}/sessions/v/v1/chat/completions", timeout=60,
                    json={"model": "m", "messages": HI, "stop_regex": [], "max_tokens": 2})
    assert ok.status_code == 200 and ok.headers["x-seedproxy-request-index"] == "0"


def test_no_max_tokens_generates_up_to_the_context_as_the_chat_route_does(
        fake: Fake, start_proxy: Callable[..., str]) -> None:
    """Left out, /generate's max_new_tokens is 128; SGLang's chat route sends null (up to
    the context window) when the client set no max_tokens, and so does this mode."""
    base = tito(start_proxy, fake)
    reply = httpx.post(f"{base}/sessions/c/v1/chat/completions", timeout=60,
                       json={"model": "m", "messages": HI})
    assert reply.status_code == 200, reply.text
    [request] = generated(fake)
    assert request["sampling_params"]["max_new_tokens"] is None
    answer = reply.json()
    room = fake.switches.context_length - len(request["input_ids"]) - 1
    assert answer["usage"]["completion_tokens"] == room > 16
    assert answer["choices"][0]["finish_reason"] == "length"


def test_vllm_gets_a_null_max_tokens_when_none_was_asked(
        vllm: tuple[str, CompatSwitches], start_proxy: Callable[..., str]) -> None:
    """vLLM's /v1/completions stops at 16 when max_tokens is left out; null is "up to
    the context", what its chat route does with no max_tokens."""
    url, switches = vllm
    base = start_proxy([url], backend="vllm", token_in_token_out=True, tokenizer=TOKENIZER)
    reply = httpx.post(f"{base}/sessions/v/v1/chat/completions", timeout=60,
                       json={"model": "m", "messages": HI})
    assert reply.status_code == 200, reply.text
    [request] = [r for r in switches.received if isinstance(r.get("prompt"), list)]
    assert "max_tokens" in request and request["max_tokens"] is None
