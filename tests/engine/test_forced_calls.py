"""Forced tool calls on the engine (tiny model, real llguidance grammar): its chat route
forces ``tool_choice: "required"`` / a named function with SGLang's JSON-array schema
and reads the calls back; token-in-token-out mode in front of it samples exactly the
same tokens, parses the same calls and records them; ``structural_tag`` runs on the
engine as SGLang's llguidance backend builds it, and one it cannot build is its 400."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from seedproxy.engine import RunningEngine
from seedproxy.engine.model import default_gguf_path, gguf_tokenizer_dir

pytestmark = pytest.mark.engine

LOOKUP = {"type": "function", "function": {"name": "lookup", "parameters": {
    "type": "object", "properties": {"word": {"type": "string", "maxLength": 12}},
    "required": ["word"]}}}
CLOCK = {"type": "function", "function": {"name": "clock", "parameters": {
    "type": "object", "properties": {"zone": {"type": "string", "enum": ["utc", "cet"]}},
    "required": ["zone"]}}}
MESSAGES = [{"role": "user", "content": "What does the word sea mean?"}]
NAMED = {"type": "function", "function": {"name": "clock"}}


@pytest.fixture(scope="module")
def compact() -> dict[str, float]:
    """A logit_bias so a random-weight model ends the JSON as soon as the grammar lets
    it: against whitespace-only tokens, for closing ones (``"``, ``}``, ``]``). The
    forced-call grammar takes free whitespace and extra keys (SGLang's schema, with
    llguidance's defaults), which such a model would otherwise wander in until
    max_tokens; the grammar masks a closer wherever JSON does not allow it, so the
    call's shape is still the grammar's alone."""
    from seedproxy.engine.testing import tiny_tokenizer

    tok = tiny_tokenizer()
    bias: dict[str, float] = {}
    for i in range(len(tok)):
        text = tok.decode([i])
        if text and not text.strip():
            bias[str(i)] = -100.0
        elif text and set(text) <= set('{"}]'):
            bias[str(i)] = 30.0
    return bias


@pytest.fixture
def tito(engine: RunningEngine, start_proxy: Callable[..., str]) -> str:
    return start_proxy([engine.url], token_in_token_out=True,
                       tokenizer=str(gguf_tokenizer_dir(default_gguf_path())))


def check_calls(calls: list[dict[str, Any]], names: set[str]) -> None:
    assert calls
    for call in calls:
        assert call["id"].startswith("call_") and call["type"] == "function"
        assert call["function"]["name"] in names
        arguments = json.loads(call["function"]["arguments"])
        if call["function"]["name"] == "lookup":
            assert isinstance(arguments["word"], str) and len(arguments["word"]) <= 12
        else:
            assert arguments["zone"] in ("utc", "cet")


def test_the_engines_chat_route_forces_a_parseable_call(
        engine: RunningEngine, compact: dict[str, float]) -> None:
    names = {"lookup", "clock"}
    body = {"model": "m", "messages": MESSAGES, "tools": [LOOKUP, CLOCK],
            "tool_choice": "required", "max_tokens": 80, "seed": 5, "logit_bias": compact}
    whole = httpx.post(f"{engine.url}/v1/chat/completions", json=body, timeout=120).json()
    [answer] = whole["choices"]
    assert answer["finish_reason"] == "tool_calls", answer
    assert answer["message"]["content"] == "" and answer["matched_stop"] is None
    check_calls(answer["message"]["tool_calls"], names)
    streamed: list[dict[str, Any]] = []
    finish = None
    with httpx.stream("POST", f"{engine.url}/v1/chat/completions", timeout=120,
                      json={**body, "stream": True}) as reply:
        for line in reply.iter_lines():
            if not line.startswith("data: {"):
                continue
            for c in json.loads(line[6:])["choices"]:
                assert not c["delta"].get("content")
                streamed += c["delta"].get("tool_calls") or []
                finish = c["finish_reason"] or finish
    assert finish == "tool_calls"
    shown = [c["function"] for c in answer["message"]["tool_calls"]]
    assert [c["function"] for c in streamed] == shown  # the same seed, the same calls


def test_a_named_function_is_forced_to_an_object_as_on_sglangs_default_backend(
        engine: RunningEngine, compact: dict[str, float]) -> None:
    """SGLang's named-tool schema gives its items no ``"type": "object"``; xgrammar
    (SGLang's default backend) reads ``properties`` as an object anyway, so the engine
    does too: a model pushed hard towards scalars (``false``, ``null``, digits, empty
    strings) still writes the named call, never ``[false]`` left as content."""
    from seedproxy.engine.testing import tiny_tokenizer

    tok = tiny_tokenizer()
    scalars = {str(i): 60.0 for i in range(len(tok))
               if tok.decode([i]).strip() in ("false", "true", "null", "0", "1", '""')}
    assert scalars
    body = {"model": "m", "messages": MESSAGES, "tools": [LOOKUP, CLOCK],
            "tool_choice": NAMED, "max_tokens": 80, "logit_bias": {**compact, **scalars}}
    for seed in range(3):
        answer = httpx.post(f"{engine.url}/v1/chat/completions", timeout=120,
                            json={**body, "seed": seed}).json()["choices"][0]
        assert answer["finish_reason"] == "tool_calls", answer
        calls = answer["message"]["tool_calls"]
        assert [c["function"]["name"] for c in calls] == ["clock"] * len(calls)
        for call in calls:
            assert isinstance(json.loads(call["function"]["arguments"]), dict)


def test_schema_types_are_inferred_as_xgrammar_infers_them() -> None:
    """Pinned against xgrammar 0.2.9's ``compile_json_schema``: ``properties`` or
    ``additionalProperties`` make an object, ``items`` an array, nothing else infers;
    settled subschemas are left alone; nesting is followed."""
    from seedproxy.engine.schema_types import with_inferred_types

    schema = {"type": "array", "minItems": 1, "items": {
        "properties": {"name": {"type": "string"}, "p": {"properties": {}}},
        "required": ["name"]}, "$defs": {"d": {"items": {"additionalProperties": False}}}}
    assert json.dumps(with_inferred_types(schema)) == json.dumps({
        "type": "array", "minItems": 1, "items": {
            "type": "object", "properties": {"name": {"type": "string"},
                                             "p": {"type": "object", "properties": {}}},
            "required": ["name"]}, "$defs": {"d": {"type": "array", "items": {
                "type": "object", "additionalProperties": False}}}})
    for left in ({"required": ["a"]}, {"minItems": 1}, {"minLength": 1},
                 {"anyOf": [{"type": "string"}], "properties": {}},
                 {"$ref": "#/$defs/d", "properties": {}}):
        assert with_inferred_types(dict(left)) == left


def test_tito_forces_exactly_what_the_engines_chat_route_forces(
        tito: str, engine: RunningEngine, compact: dict[str, float]) -> None:
    body = {"model": "m", "messages": MESSAGES, "tools": [LOOKUP, CLOCK],
            "tool_choice": "required", "max_tokens": 80, "logit_bias": compact}
    with httpx.Client(base_url=tito, timeout=120) as http:
        reply = http.post("/sessions/forced/v1/chat/completions", json=body)
        assert reply.status_code == 200, reply.text
        [turn] = http.get("/sessions/forced/trajectory").json()["interactions"]
    seed = int(reply.headers["x-seedproxy-seed"])
    chat = httpx.post(f"{engine.url}/v1/chat/completions", timeout=120, json={
        **body, "seed": seed, "return_token_ids": True}).json()["choices"][0]
    assert turn["prompt_token_ids"] == chat["prompt_token_ids"]
    assert turn["completion_token_ids"] == chat["response_token_ids"]
    assert turn["completion_token_ids"][-1] == 2  # the grammar ends with <|im_end|>
    [answer] = reply.json()["choices"]
    assert answer["finish_reason"] == "tool_calls" == chat["finish_reason"]
    check_calls(answer["message"]["tool_calls"], {"lookup", "clock"})
    assert [c["function"] for c in answer["message"]["tool_calls"]] == [
        c["function"] for c in chat["message"]["tool_calls"]]


def test_invalid_tools_are_the_engines_400_too(engine: RunningEngine) -> None:
    reply = httpx.post(f"{engine.url}/v1/chat/completions", timeout=60, json={
        "model": "m", "messages": MESSAGES, "tools": [LOOKUP],
        "tool_choice": {"type": "function", "function": {"name": "nope"}}})
    assert reply.status_code == 400
    assert reply.json()["message"] == "Tool 'nope' not found in tools list."


def test_a_structural_tag_runs_on_the_engine_and_a_bad_one_is_its_400_relayed(
        tito: str) -> None:
    """``response_format: structural_tag`` reaches the engine's ``/generate``, which
    builds it as SGLang's llguidance backend does: a tag it can build constrains the
    answer; one it cannot (a structure without a schema) is its 400, relayed."""
    fmt = {"type": "structural_tag", "triggers": ["Call:"], "structures": [
        {"begin": "Call:", "schema": {"type": "integer"}, "end": "."}]}
    reply = httpx.post(f"{tito}/sessions/st/v1/chat/completions", timeout=60, json={
        "model": "m", "messages": MESSAGES, "response_format": fmt, "max_tokens": 8})
    assert reply.status_code == 200, reply.text
    bad = {**fmt, "structures": [{"begin": "<w>", "end": "</w>"}], "triggers": ["<w>"]}
    reply = httpx.post(f"{tito}/sessions/st/v1/chat/completions", timeout=60, json={
        "model": "m", "messages": MESSAGES, "response_format": bad, "max_tokens": 8})
    assert reply.status_code == 400, reply.text
    assert "Invalid structural_tag" in reply.json()["error"]["message"]


def test_a_tool_parsers_structural_tag_runs_on_the_engine_as_literal_text(
        engine: RunningEngine, start_proxy: Callable[..., str]) -> None:
    """With ``--tool-parser`` in front of an engine taken for SGLang (an upstream of its
    own), a forced call is the parser's structural tag, as on SGLang; its trigger
    ``<tool_call>`` is no special token of this tokenizer, so the engine reads it as
    literal text, as xgrammar does, and builds the tag; auto calls stay free."""
    base = start_proxy([engine.url], token_in_token_out=True, tool_parser="hermes",
                       tokenizer=str(gguf_tokenizer_dir(default_gguf_path())))
    body = {"model": "m", "messages": MESSAGES, "tools": [LOOKUP, CLOCK], "max_tokens": 4}
    reply = httpx.post(f"{base}/v1/chat/completions", timeout=60,
                       json={**body, "tool_choice": "required"})
    assert reply.status_code == 200, reply.text
    free = httpx.post(f"{base}/v1/chat/completions", timeout=60, json=body)
    assert free.status_code == 200, free.text


def test_the_embedded_engine_forces_calls_with_a_tool_parser_by_the_json_array(
        engine: RunningEngine, start_proxy: Callable[..., str],
        compact: dict[str, float]) -> None:
    """In front of the embedded engine (``seedproxy serve``'s token-in-token-out mode,
    ``embedded``), a ``--tool-parser`` does not bring structural tags the engine cannot
    run: a forced call is the JSON array, sampled exactly as the engine's own chat
    route samples it, and a strict ``auto`` call is left free."""
    from seedproxy.proxy.app import open_tito_mode
    from seedproxy.settings import Settings

    settings = Settings(upstream=[engine.url], token_in_token_out=True, tool_parser="hermes",
                        tokenizer=str(gguf_tokenizer_dir(default_gguf_path())))
    mode = open_tito_mode(settings, embedded=True)
    base = start_proxy([engine.url], token_in_token_out=True, tool_parser="hermes",
                       tokenizer=settings.tokenizer, _app={"tito": mode})
    body = {"model": "m", "messages": MESSAGES, "tools": [LOOKUP, CLOCK],
            "tool_choice": "required", "max_tokens": 80, "logit_bias": compact}
    reply = httpx.post(f"{base}/sessions/embedded/v1/chat/completions", timeout=120,
                       json=body)
    assert reply.status_code == 200, reply.text
    seed = int(reply.headers["x-seedproxy-seed"])
    chat = httpx.post(f"{engine.url}/v1/chat/completions", timeout=120,
                      json={**body, "seed": seed}).json()["choices"][0]
    [answer] = reply.json()["choices"]
    assert answer["finish_reason"] == "tool_calls" == chat["finish_reason"]
    check_calls(answer["message"]["tool_calls"], {"lookup", "clock"})
    assert [c["function"] for c in answer["message"]["tool_calls"]] == [
        c["function"] for c in chat["message"]["tool_calls"]]
    strict = {**LOOKUP, "function": {**LOOKUP["function"], "strict": True}}
    free = httpx.post(f"{base}/v1/chat/completions", timeout=120, json={
        "model": "m", "messages": MESSAGES, "tools": [strict], "max_tokens": 4})
    assert free.status_code == 200, free.text

