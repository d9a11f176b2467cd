"""A ``--tool-parser``'s structural tag in token-in-token-out mode, against the fake
SGLang's /generate: the ``structural_tag`` text that arrives is the one SGLang 0.5.23's
chat route sends with ``--tool-call-parser`` (``FunctionCallParser.
get_structure_constraint``: a forced call, or ``auto`` with a strict tool), and the
answer, in the parser's own format, comes back as calls recorded exactly."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anthropic
import httpx
import openai
import pytest

pytest.importorskip("transformers")

from tests.conftest import Fake  # noqa: E402
from tests.tito.test_contract import TEMPLATE, TOKENIZER, generated  # noqa: E402

LOOKUP: dict[str, Any] = {"type": "function", "function": {
    "name": "lookup", "description": "Look a word up", "parameters": {
        "type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]}}}
CLOCK: dict[str, Any] = {"type": "function", "function": {"name": "clock"}}
STRICT: dict[str, Any] = {"type": "function", "function": {
    **LOOKUP["function"], "strict": True}}
HI: list[Any] = [{"role": "user", "content": "What is the sea?"}]
NAMED: dict[str, Any] = {"type": "function", "function": {"name": "lookup"}}

# Each detector's structure_info in sglang 0.5.23 python/sglang/srt/function_call/
# (hermes_detector.py, qwen25_detector.py, llama32_detector.py, mistral_detector.py,
# deepseekv3_detector.py, deepseekv31_detector.py), written out by hand: the text
# before the name, after it, the end, and the trigger; then what a model writes
# inside that frame for lookup({"word": "sea"}).
FRAMES: dict[str, tuple[str, str, str, str, str]] = {
    "hermes": ('<tool_call>{"name":"', '", "arguments":', "}</tool_call>", "<tool_call>",
               '<tool_call>{"name":"lookup", "arguments":{"word": "sea"}}</tool_call>'),
    "qwen25": ('<tool_call>\n{"name":"', '", "arguments":', "}\n</tool_call>", "<tool_call>",
               '<tool_call>\n{"name":"lookup", "arguments":{"word": "sea"}}\n</tool_call>'),
    "llama3": ('<|python_tag|>{"name":"', '", "arguments":', "}", "<|python_tag|>",
               '<|python_tag|>{"name":"lookup", "arguments":{"word": "sea"}}'),
    "mistral": ('[TOOL_CALLS] [{"name":"', '", "arguments":', "}]", "[TOOL_CALLS]",
                '[TOOL_CALLS] [{"name":"lookup", "arguments":{"word": "sea"}}]'),
    "deepseekv3": (
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>", "\n```json\n",
        "\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>", "<｜tool▁calls▁begin｜>",
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>lookup\n```json\n"
        '{"word": "sea"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>'),
    "deepseekv31": (
        "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>", "<｜tool▁call▁begin｜>",
        '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>lookup<｜tool▁sep｜>{"word": "sea"}'
        "<｜tool▁call▁end｜><｜tool▁calls▁end｜>"),
}
FRAMES["qwen"] = FRAMES["qwen25"]
FRAMES["llama3-json"] = FRAMES["llama3"]

HERMES_REQUIRED = (
    '{"type": "structural_tag", "structures": [{"begin": "<tool_call>{\\"name\\":\\"lookup'
    '\\", \\"arguments\\":", "schema": {}, "end": "}</tool_call>"}, {"begin": "<tool_call>'
    '{\\"name\\":\\"clock\\", \\"arguments\\":", "schema": {}, "end": "}</tool_call>"}], '
    '"triggers": ["<tool_call>"], "at_least_one": true}')
"""protocol.py to_sampling_params: json.dumps(LegacyStructuralTagResponseFormat
.model_dump(by_alias=True)), key order type, structures (begin, schema, end), triggers,
at_least_one; a tool that is not strict has schema {} (get_legacy_structural_tag)."""


def expected_tag(parser: str, schemas: list[str], at_least_one: str) -> str:
    """The tag text for lookup then clock, from the pinned frame strings (only the
    strings go through json.dumps, for their escapes: ensure_ascii, as SGLang)."""
    before, after, end, trigger, _ = FRAMES[parser]
    q = json.dumps
    items = [f'{{"begin": {q(before + name + after)}, "schema": {schema}, "end": {q(end)}}}'
             for name, schema in zip(["lookup", "clock"], schemas, strict=True)]
    return (f'{{"type": "structural_tag", "structures": [{", ".join(items)}], '
            f'"triggers": [{q(trigger)}], "at_least_one": {at_least_one}}}')


def parsed(start_proxy: Callable[..., str], fake: Fake, parser: str | None) -> str:
    return start_proxy([fake.url], token_in_token_out=True, tokenizer=TOKENIZER,
                       chat_template=TEMPLATE, tool_parser=parser)


def test_the_pinned_hermes_text_is_what_the_frames_give() -> None:
    assert expected_tag("hermes", ["{}", "{}"], "true") == HERMES_REQUIRED


@pytest.mark.parametrize("parser", sorted(FRAMES))
def test_a_forced_call_is_the_parsers_structural_tag_and_reads_back_as_a_call(
        fake: Fake, start_proxy: Callable[..., str], encode: Callable[[str], list[int]],
        parser: str) -> None:
    base = parsed(start_proxy, fake, parser)
    answer = encode(FRAMES[parser][4])
    fake.switches.script = [answer]
    client = openai.OpenAI(base_url=f"{base}/sessions/t/v1", api_key="x", max_retries=0)
    reply = client.chat.completions.create(model="m", messages=HI, tools=[LOOKUP, CLOCK],
                                           tool_choice="required")
    [sent] = generated(fake)
    assert sent["sampling_params"]["structural_tag"] == expected_tag(
        parser, ["{}", "{}"], "true")
    assert "json_schema" not in sent["sampling_params"]
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    [call] = choice.message.tool_calls or []
    assert (call.function.name, call.function.arguments) == ("lookup", '{"word": "sea"}')
    [turn] = httpx.get(f"{base}/sessions/t/trajectory").json()["interactions"]
    assert turn["prompt_token_ids"] == sent["input_ids"]
    assert turn["completion_token_ids"] == answer  # exactly what /generate sampled
    assert turn["finish_reason"] == "tool_calls"


@pytest.mark.parametrize(("fields", "tools", "tag"), [
    ({"tool_choice": "required"}, [LOOKUP, CLOCK], HERMES_REQUIRED),
    # SGLang's legacy tag has no call count: parallel_tool_calls changes nothing.
    ({"tool_choice": "required", "parallel_tool_calls": False}, [LOOKUP, CLOCK],
     HERMES_REQUIRED),
    # A named function: every tool's structure (SGLang passes them all), at least one.
    ({"tool_choice": NAMED}, [LOOKUP, CLOCK], HERMES_REQUIRED),
    # auto (or left out) with a strict tool: its schema, calls optional.
    ({}, [STRICT, CLOCK], expected_tag("hermes", [
        '{"type": "object", "properties": {"word": {"type": "string"}}, '
        '"required": ["word"]}', "{}"], "false")),
    ({"tool_choice": "auto"}, [STRICT, CLOCK], expected_tag("hermes", [
        '{"type": "object", "properties": {"word": {"type": "string"}}, '
        '"required": ["word"]}', "{}"], "false")),
    # A strict forced call carries the schema too.
    ({"tool_choice": "required"}, [STRICT, CLOCK], expected_tag("hermes", [
        '{"type": "object", "properties": {"word": {"type": "string"}}, '
        '"required": ["word"]}', "{}"], "true")),
    ({"tool_choice": "auto"}, [LOOKUP, CLOCK], None),
    ({"tool_choice": "none"}, [STRICT, CLOCK], None),
], ids=["required", "required-single", "named", "strict-default", "strict-auto",
        "strict-required", "auto", "none"])
def test_when_sglang_sends_the_tag_and_its_exact_text(
        fake: Fake, start_proxy: Callable[..., str], encode: Callable[[str], list[int]],
        fields: dict[str, Any], tools: list[Any], tag: str | None) -> None:
    base = parsed(start_proxy, fake, "hermes")
    fake.switches.script = [encode(FRAMES["hermes"][4])]
    reply = httpx.post(f"{base}/v1/chat/completions", timeout=60,
                       json={"model": "m", "messages": HI, "tools": tools, **fields})
    assert reply.status_code == 200, reply.text
    [sent] = generated(fake)
    assert sent["sampling_params"].get("structural_tag") == tag
    assert "json_schema" not in sent["sampling_params"]
    from transformers import AutoTokenizer

    prompt = AutoTokenizer.from_pretrained(TOKENIZER).decode(sent["input_ids"])
    message = reply.json()["choices"][0]["message"]
    if fields.get("tool_choice") != "none":
        # A named function still renders only that tool, as SGLang's chat route does.
        assert ('"name": "clock"' in prompt) is (fields.get("tool_choice") != NAMED)
        assert [c["function"]["name"] for c in message["tool_calls"]] == ["lookup"]
    else:
        assert "tool_calls" not in message  # none reads no calls


def test_a_strict_tag_gives_way_to_the_clients_own_constraint(
        fake: Fake, start_proxy: Callable[..., str], encode: Callable[[str], list[int]]) -> None:
    """SGLang drops the auto tag when the request has its own constraint (a warning)."""
    base = parsed(start_proxy, fake, "hermes")
    fake.switches.script = [encode('{"a": 1}')]
    reply = httpx.post(f"{base}/v1/chat/completions", timeout=60, json={
        "model": "m", "messages": HI, "tools": [STRICT],
        "response_format": {"type": "json_object"}})
    assert reply.status_code == 200, reply.text
    [sent] = generated(fake)
    assert sent["sampling_params"]["json_schema"] == '{"type": "object"}'
    assert "structural_tag" not in sent["sampling_params"]
    assert reply.json()["choices"][0]["message"]["content"] == '{"a": 1}'


def test_a_streamed_tagged_call_is_the_same_message(
        fake: Fake, start_proxy: Callable[..., str], encode: Callable[[str], list[int]]) -> None:
    base = parsed(start_proxy, fake, "qwen25")
    two = ('<tool_call>\n{"name":"clock", "arguments":{}}\n</tool_call>\n<tool_call>\n'
           '{"name":"lookup", "arguments":{"word": "é"}}\n</tool_call>')
    fake.switches.script = [encode(two), encode(two)]
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="x", max_retries=0)
    whole = client.chat.completions.create(model="m", messages=HI, tools=[LOOKUP, CLOCK],
                                           tool_choice="required", seed=3)
    calls: list[Any] = []
    content, finish = "", None
    for chunk in client.chat.completions.create(model="m", messages=HI, tools=[LOOKUP, CLOCK],
                                                tool_choice="required", seed=3, stream=True):
        delta = chunk.choices[0].delta
        content += delta.content or ""
        calls += delta.tool_calls or []
        finish = chunk.choices[0].finish_reason or finish
    made: list[Any] = whole.choices[0].message.tool_calls or []
    shown = [(c.function.name, c.function.arguments) for c in made]
    assert shown == [("clock", "{}"), ("lookup", '{"word": "é"}')]
    assert [(c.function.name, c.function.arguments) for c in calls] == shown
    assert finish == "tool_calls" and content.strip() == ""


def test_without_a_tool_parser_a_forced_call_is_the_json_array(
        fake: Fake, start_proxy: Callable[..., str], encode: Callable[[str], list[int]]) -> None:
    """No tool parser: the JSON-array grammar, read back as calls."""
    base = parsed(start_proxy, fake, None)
    fake.switches.script = [encode('[{"name": "lookup", "parameters": {"word": "sea"}}]')]
    reply = httpx.post(f"{base}/v1/chat/completions", timeout=60, json={
        "model": "m", "messages": HI, "tools": [STRICT, CLOCK], "tool_choice": "required"})
    [sent] = generated(fake)
    assert "structural_tag" not in sent["sampling_params"]
    assert json.loads(sent["sampling_params"]["json_schema"])["minItems"] == 1
    [call] = reply.json()["choices"][0]["message"]["tool_calls"]
    assert call["function"] == {"name": "lookup", "arguments": '{"word": "sea"}'}


def test_a_strict_flag_that_is_not_a_boolean_is_a_400(
        fake: Fake, start_proxy: Callable[..., str]) -> None:
    base = parsed(start_proxy, fake, "hermes")
    url = f"{base}/sessions/b/v1/chat/completions"
    bad = {"type": "function", "function": {"name": "f", "strict": "yes"}}
    reply = httpx.post(url, timeout=60, json={"model": "m", "messages": HI, "tools": [bad]})
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["param"] == "tools" and error["type"] == "invalid_request_error"
    assert error["message"] == "tools[0].function.strict must be a boolean"
    assert generated(fake) == []
    fake.switches.script = [[1, 2]]
    after = httpx.post(url, json={"model": "m", "messages": HI}, timeout=60)
    assert after.headers["x-seedproxy-request-index"] == "0"


# sglang 0.5.23 kimik2_detector.py get_structural_tag asks xgrammar 0.2.7 for its
# "kimi" tag (builtin_structural_tag.py get_kimi_structural_tag, reasoning disabled;
# a tool that is not strict gets {"type": "object"} when forced); the text is
# json.dumps of its model_dump(by_alias=True), every default in field order
# (structural_tag.py). Written out by hand, and checked once offline against
# xgrammar 0.2.7 itself.
def _kimi_call(name: str, schema: str) -> str:
    return ('{"type": "tag", "begin": "<|tool_call_begin|>functions.' + name + ':", '
            '"content": {"type": "sequence", "elements": [{"type": "regex", "pattern": '
            '"\\\\d+"}, {"type": "const_string", "value": "<|tool_call_argument_begin|>"}, '
            '{"type": "json_schema", "json_schema": ' + schema + ', "style": "json", '
            '"any_order": false, "max_whitespace_cnt": null}]}, "end": "<|tool_call_end|>"}')


KIMI_REQUIRED = (
    '{"type": "structural_tag", "format": {"type": "sequence", "elements": [{"type": '
    '"const_string", "value": "<|tool_calls_section_begin|>"}, {"type": '
    '"tags_with_separator", "tags": [' + _kimi_call("lookup", '{"type": "object"}') + ", "
    + _kimi_call("clock", '{"type": "object"}') + '], "separator": "", "at_least_one": '
    'true, "stop_after_first": false}, {"type": "const_string", "value": '
    '"<|tool_calls_section_end|>"}]}}')
KIMI_NAMED = (
    '{"type": "structural_tag", "format": {"type": "sequence", "elements": [{"type": '
    '"const_string", "value": "<|tool_calls_section_begin|>"}, '
    + _kimi_call("lookup", '{"type": "object"}') + ', {"type": "const_string", "value": '
    '"<|tool_calls_section_end|>"}]}}')
KIMI_STRICT_AUTO = (
    '{"type": "structural_tag", "format": {"type": "triggered_tags", "triggers": '
    '["<|tool_calls_section_begin|>"], "tags": [{"type": "tag", "begin": '
    '"<|tool_calls_section_begin|>", "content": {"type": "tags_with_separator", "tags": ['
    + _kimi_call("lookup", '{"type": "object", "properties": {"word": {"type": "string"}}, '
                 '"required": ["word"]}') + ", " + _kimi_call("clock", "true")
    + '], "separator": "", "at_least_one": true, "stop_after_first": true}, "end": '
    '"<|tool_calls_section_end|>"}], "at_least_one": false, "stop_after_first": true, '
    '"excludes": ["<|tool_call_begin|>"]}}')
KIMI_CALL = ("<|tool_calls_section_begin|><|tool_call_begin|>functions.lookup:0"
             '<|tool_call_argument_begin|>{"word": "sea"}<|tool_call_end|>'
             "<|tool_calls_section_end|>")


@pytest.mark.parametrize(("fields", "tools", "tag"), [
    ({"tool_choice": "required"}, [LOOKUP, CLOCK], KIMI_REQUIRED),
    ({"tool_choice": NAMED}, [LOOKUP, CLOCK], KIMI_NAMED),
    # --reasoning-parser kimi_k2 owns <think>: SGLang lets it through the free text.
    ({"parallel_tool_calls": False}, [STRICT, CLOCK], KIMI_STRICT_AUTO),
], ids=["required", "named", "strict-auto"])
def test_kimi_k2_sends_xgrammars_native_kimi_tag(
        fake: Fake, start_proxy: Callable[..., str], encode: Callable[[str], list[int]],
        fields: dict[str, Any], tools: list[Any], tag: str) -> None:
    base = start_proxy([fake.url], token_in_token_out=True, tokenizer=TOKENIZER,
                       chat_template=TEMPLATE, tool_parser="kimi_k2",
                       reasoning_parser="kimi_k2")
    answer = encode(KIMI_CALL)
    fake.switches.script = [answer]
    reply = httpx.post(f"{base}/sessions/k/v1/chat/completions", timeout=60,
                       json={"model": "m", "messages": HI, "tools": tools, **fields})
    assert reply.status_code == 200, reply.text
    [sent] = generated(fake)
    assert sent["sampling_params"]["structural_tag"] == tag
    assert "json_schema" not in sent["sampling_params"]
    [call] = reply.json()["choices"][0]["message"]["tool_calls"]
    assert call["id"] == "functions.lookup:0"
    assert call["function"] == {"name": "lookup", "arguments": '{"word": "sea"}'}
    [turn] = httpx.get(f"{base}/sessions/k/trajectory").json()["interactions"]
    assert turn["completion_token_ids"] == answer


def test_anthropic_any_takes_the_tag_and_the_next_turn_extends_the_call(
        fake: Fake, start_proxy: Callable[..., str], encode: Callable[[str], list[int]]) -> None:
    base = parsed(start_proxy, fake, "hermes")
    call, answer = encode(FRAMES["hermes"][4]), encode("Salt water.")
    fake.switches.script = [call, answer]
    client = anthropic.Anthropic(base_url=f"{base}/sessions/a", api_key="x", max_retries=0)
    tool: Any = {"name": "lookup", "description": "Look a word up",
                 "input_schema": LOOKUP["function"]["parameters"]}
    messages: list[Any] = [{"role": "user", "content": "The sea?"}]
    first = client.messages.create(model="m", max_tokens=64, messages=messages,
                                   tools=[tool], tool_choice={"type": "any"})
    assert first.stop_reason == "tool_use"
    [block] = first.content
    assert block.type == "tool_use" and block.input == {"word": "sea"}
    messages += [{"role": "assistant", "content": [block.model_dump()]},
                 {"role": "user", "content": [{"type": "tool_result",
                                               "tool_use_id": block.id, "content": "salt"}]}]
    second = client.messages.create(model="m", max_tokens=64, messages=messages, tools=[tool])
    assert second.content[0].type == "text"
    sent = generated(fake)
    assert sent[0]["sampling_params"]["structural_tag"] == (
        '{"type": "structural_tag", "structures": [{"begin": "<tool_call>{\\"name\\":'
        '\\"lookup\\", \\"arguments\\":", "schema": {}, "end": "}</tool_call>"}], '
        '"triggers": ["<tool_call>"], "at_least_one": true}')
    assert "structural_tag" not in sent[1]["sampling_params"]  # auto, nothing strict
    head = sent[0]["input_ids"] + call
    assert sent[1]["input_ids"][: len(head)] == head  # the sampled call, extended
    turns = httpx.get(f"{base}/sessions/a/trajectory").json()["interactions"]
    assert turns[0]["completion_token_ids"] == call
    assert turns[1]["lineage"]["extends"] == {"interaction_id": "i0", "choice": 0}


CLASHING: list[Any] = [
    {"type": "function", "function": {"name": "lookup", "strict": True, "parameters": {
        "$defs": {"w": {"type": "string"}}, "type": "object"}}},
    {"type": "function", "function": {"name": "clock", "parameters": {
        "$defs": {"w": {"type": "integer"}}, "type": "object"}}}]


@pytest.mark.parametrize(("fields", "sent_key"), [
    ({}, None), ({"tool_choice": NAMED}, "json_schema")], ids=["auto", "named"])
def test_tools_whose_defs_clash_get_no_tag(
        fake: Fake, start_proxy: Callable[..., str], encode: Callable[[str], list[int]],
        fields: dict[str, Any], sent_key: str | None) -> None:
    """SGLang's legacy-tag builder refuses one $defs name with two schemas, and its
    route goes on without the tag: auto is free, a named choice takes the JSON array."""
    base = parsed(start_proxy, fake, "hermes")
    fake.switches.script = [encode('[{"name": "lookup", "parameters": {}}]')]
    reply = httpx.post(f"{base}/v1/chat/completions", timeout=60, json={
        "model": "m", "messages": HI, "tools": CLASHING, **fields})
    assert reply.status_code == 200, reply.text
    [sent] = generated(fake)
    assert "structural_tag" not in sent["sampling_params"]
    assert [k for k in ("json_schema",) if k in sent["sampling_params"]] == (
        [sent_key] if sent_key else [])
