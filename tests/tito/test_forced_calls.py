"""A forcing ``tool_choice`` (``required``, a named function; Anthropic's ``any`` /
``tool``; a Responses named function) in token-in-token-out mode with no
``--tool-parser``, against the fake SGLang's /generate: the grammar sent is the
JSON-array schema SGLang 0.5.23's chat route builds then, the forced output comes back
as calls, is recorded exactly, and the next turn extends it. Invalid tools are a 400
naming their problem, as SGLang's ``_validate_request`` says. (With a tool parser the
constraint is the parser's structural tag: ``test_tool_structural_tags``.)"""

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
from tests.helpers.fake_compat import CompatSwitches  # noqa: E402
from tests.tito.test_contract import TEMPLATE, TOKENIZER, generated, tito  # noqa: E402

LOOKUP: dict[str, Any] = {"type": "function", "function": {
    "name": "lookup", "description": "Look a word up", "parameters": {
        "type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]}}}
CLOCK: dict[str, Any] = {"type": "function", "function": {"name": "clock"}}
TOOLS: list[Any] = [LOOKUP, CLOCK]
HI: list[Any] = [{"role": "user", "content": "What is the sea?"}]
NAMED: dict[str, Any] = {"type": "function", "function": {"name": "lookup"}}

# Written out by hand from sglang 0.5.23 python/sglang/srt/function_call/utils.py
# (get_json_schema_constraint, _get_tool_schema), as serving_chat.py's _process_messages
# calls it without a tool-call parser, json.dumps'd by protocol.py to_sampling_params
# (convert_json_schema_to_str): key order and separators are json.dumps' defaults.
LOOKUP_ITEM = ('{"properties": {"name": {"type": "string", "enum": ["lookup"]}, '
               '"parameters": {"type": "object", "properties": {"word": {"type": "string"}}, '
               '"required": ["word"]}}, "required": ["name", "parameters"]}')
CLOCK_ITEM = ('{"properties": {"name": {"type": "string", "enum": ["clock"]}, '
              '"parameters": {"type": "object", "properties": {}}}, '
              '"required": ["name", "parameters"]}')
REQUIRED_SCHEMA = ('{"type": "array", "minItems": 1, "items": {"type": "object", "anyOf": ['
                   + LOOKUP_ITEM + ", " + CLOCK_ITEM + "]}}")
NAMED_SCHEMA = '{"type": "array", "minItems": 1, "items": ' + LOOKUP_ITEM + "}"
NAMED_SINGLE_SCHEMA = ('{"type": "array", "minItems": 1, "items": ' + LOOKUP_ITEM
                       + ', "maxItems": 1}')
CALL = '[{"name": "lookup", "parameters": {"word": "sea"}}]'


def bare(start_proxy: Callable[..., str], fake: Fake) -> str:
    """Token-in-token-out with no ``--tool-parser``: SGLang forces the JSON array."""
    return start_proxy([fake.url], token_in_token_out=True, tokenizer=TOKENIZER,
                       chat_template=TEMPLATE, reasoning_parser="think")


@pytest.mark.parametrize(("fields", "schema"), [
    ({"tool_choice": "required"}, REQUIRED_SCHEMA),
    ({"tool_choice": NAMED}, NAMED_SCHEMA),
    ({"tool_choice": NAMED, "parallel_tool_calls": False}, NAMED_SINGLE_SCHEMA),
    ({"tool_choice": "required", "parallel_tool_calls": False},
     REQUIRED_SCHEMA[:-1] + ', "maxItems": 1}'),
], ids=["required", "named", "named-single", "required-single"])
def test_the_forcing_grammar_is_the_one_sglangs_chat_route_sends(
        fake: Fake, start_proxy: Callable[..., str], encode: Callable[[str], list[int]],
        fields: dict[str, Any], schema: str) -> None:
    base = bare(start_proxy, fake)
    fake.switches.script = [encode(CALL)]
    reply = httpx.post(f"{base}/sessions/g/v1/chat/completions", timeout=60,
                       json={"model": "m", "messages": HI, "tools": TOOLS, **fields})
    assert reply.status_code == 200, reply.text
    [sent] = generated(fake)
    assert sent["sampling_params"]["json_schema"] == schema
    assert json.loads(schema)["minItems"] == 1  # the pinned text is JSON
    assert sent["require_reasoning"] is True  # --reasoning-parser: the grammar after it
    from transformers import AutoTokenizer

    prompt = AutoTokenizer.from_pretrained(TOKENIZER).decode(sent["input_ids"])
    assert '"name": "lookup"' in prompt
    # A named function renders only that tool, as SGLang's chat route does.
    assert ('"name": "clock"' in prompt) is (fields["tool_choice"] == "required")


def test_tool_choice_none_renders_no_tools_as_sglangs_chat_route(
        fake: Fake, start_proxy: Callable[..., str], encode: Callable[[str], list[int]]) -> None:
    """SGLang's chat route gives the template no tools for ``tool_choice: "none"``: the
    prompt is the one without ``tools``, and the answer is not parsed for calls."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(TOKENIZER)
    template = open(TEMPLATE, encoding="utf-8").read()
    base = tito(start_proxy, fake)
    fake.switches.script = [encode('<tool_call>\n{"name": "lookup"}\n</tool_call>')] * 2
    answers = []
    for choice in ("none", "auto"):
        reply = httpx.post(f"{base}/sessions/none-{choice}/v1/chat/completions", timeout=60,
                           json={"model": "m", "messages": HI, "tools": TOOLS,
                                 "tool_choice": choice})
        assert reply.status_code == 200, reply.text
        answers.append(reply.json()["choices"][0])
    without, with_tools = (r["input_ids"] for r in generated(fake))
    expected = tok.apply_chat_template(HI, chat_template=template, add_generation_prompt=True,
                                       tokenize=False)
    assert without == list(tok.encode(expected, add_special_tokens=False))
    assert with_tools != without
    assert answers[0]["message"].get("tool_calls") is None
    assert answers[0]["message"]["content"].startswith("<tool_call>")
    assert answers[1]["message"]["tool_calls"][0]["function"]["name"] == "lookup"


def test_a_forced_call_is_a_call_recorded_exactly_and_the_next_turn_extends_it(
        fake: Fake, start_proxy: Callable[..., str],
        encode: Callable[[str], list[int]]) -> None:
    base = bare(start_proxy, fake)
    call, answer = encode(CALL), encode("Salt water.")
    fake.switches.script = [call, answer]
    client = openai.OpenAI(base_url=f"{base}/sessions/f/v1", api_key="x", max_retries=0)
    messages: list[Any] = list(HI)
    first = client.chat.completions.create(model="m", messages=messages, tools=TOOLS,
                                           tool_choice="required")
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    [made] = choice.message.tool_calls or []
    assert made.type == "function"
    assert made.function.name == "lookup" and made.function.arguments == '{"word": "sea"}'
    assert made.id.startswith("call_") and len(made.id) == 29
    messages += [choice.message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": made.id, "content": "salt water"}]
    second = client.chat.completions.create(model="m", messages=messages, tools=TOOLS)
    assert second.choices[0].message.content == "Salt water."
    sent = generated(fake)
    turns = httpx.get(f"{base}/sessions/f/trajectory").json()["interactions"]
    assert turns[0]["prompt_token_ids"] == sent[0]["input_ids"]
    assert turns[0]["completion_token_ids"] == call  # exactly what /generate sampled
    head = sent[0]["input_ids"] + call
    assert sent[1]["input_ids"][: len(head)] == head
    assert turns[1]["prompt_token_ids"] == sent[1]["input_ids"]
    assert turns[1]["lineage"]["extends"] == {"interaction_id": "i0", "choice": 0}
    assert "json_schema" not in sent[1]["sampling_params"]  # auto forces nothing


def test_a_streamed_forced_call_is_the_same_message(
        fake: Fake, start_proxy: Callable[..., str],
        encode: Callable[[str], list[int]]) -> None:
    base = bare(start_proxy, fake)
    two = '[{"name": "clock", "parameters": {}}, {"name": "lookup", "parameters": {"word": "é"}}]'
    fake.switches.script = [encode(two), encode(two)]
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="x", max_retries=0)
    whole = client.chat.completions.create(model="m", messages=HI, tools=TOOLS,
                                           tool_choice="required", seed=3)
    calls: list[Any] = []
    content, finish = "", None
    for chunk in client.chat.completions.create(model="m", messages=HI, tools=TOOLS,
                                                tool_choice="required", seed=3, stream=True):
        delta = chunk.choices[0].delta
        content += delta.content or ""
        calls += delta.tool_calls or []
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls" and content == ""
    made: list[Any] = whole.choices[0].message.tool_calls or []
    shown = [(c.function.name, c.function.arguments) for c in made]
    assert shown == [("clock", "{}"), ("lookup", '{"word": "é"}')]
    assert [(c.function.name, c.function.arguments) for c in calls] == shown
    assert [c.index for c in calls] == [0, 1]


def test_output_that_is_not_a_call_array_stays_content(
        fake: Fake, start_proxy: Callable[..., str],
        encode: Callable[[str], list[int]]) -> None:
    """A grammar cut short by max_tokens leaves broken JSON: SGLang's route returns it
    as content with the finish it had."""
    base = bare(start_proxy, fake)
    fake.switches.script = [encode('[{"name": "lookup", "param')[:-1]]
    reply = httpx.post(f"{base}/v1/chat/completions", timeout=60, json={
        "model": "m", "messages": HI, "tools": TOOLS, "tool_choice": NAMED, "max_tokens": 50})
    choice = reply.json()["choices"][0]
    assert choice["message"]["content"] == '[{"name": "lookup", "param'
    assert "tool_calls" not in choice["message"] and choice["finish_reason"] == "length"


BAD_TOOLS: list[tuple[dict[str, Any], str, str]] = [
    ({"tool_choice": "required"}, "tool_choice",
     "Tools cannot be empty if tool choice is set to required."),
    ({"tool_choice": NAMED}, "tool_choice",
     "Tools cannot be empty if tool choice is set to a specific tool."),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
     "tool_choice", "Tool 'nope' not found in tools list."),
    ({"tools": TOOLS, "tool_choice": "always"}, "tool_choice", "tool_choice must be auto"),
    ({"tools": TOOLS, "tool_choice": {"type": "function"}}, "tool_choice",
     "tool_choice must be auto"),
    ({"tools": [{"type": "function", "function": {"parameters": {}}}]}, "tools",
     "tools[0].function.name must be a non-empty string"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "wrong"}}}]}, "tools", "Tool 0 function has invalid 'parameters' schema: "),
    ({"tools": [CLOCK, {"type": "function", "function": {"name": "f", "parameters": [1]}}]},
     "tools", "Tool 1 function has invalid 'parameters' schema"),
    ({"tools": [{"type": "retrieval"}]}, "tools", "tools[0] must be"),
    ({"tools": {"lookup": LOOKUP}}, "tools", "tools must be a list"),
    ({"tools": TOOLS, "tool_choice": "required", "parallel_tool_calls": "yes"},
     "parallel_tool_calls", "parallel_tool_calls must be a boolean"),
    ({"tools": TOOLS, "tool_choice": "required", "response_format": {"type": "json_object"}},
     "tool_choice", "tool_choice 'required' or a named tool cannot be combined with "
     "response_format, regex, or ebnf"),
    ({"tools": TOOLS, "tool_choice": NAMED, "regex": "a+"}, "tool_choice",
     "tool_choice 'required' or a named tool cannot be combined"),
    ({"tools": [{"type": "function", "function": {"name": "a", "parameters": {
        "$defs": {"w": {"type": "string"}}}}},
      {"type": "function", "function": {"name": "b", "parameters": {
          "$defs": {"w": {"type": "integer"}}}}}], "tool_choice": "required"}, "tools",
     "Tool definition 'w' has multiple schemas, which is not supported."),
]


@pytest.mark.parametrize(("fields", "param", "message"), BAD_TOOLS)
def test_invalid_tools_are_a_400_naming_the_problem(
        fake: Fake, start_proxy: Callable[..., str], fields: dict[str, Any], param: str,
        message: str) -> None:
    base = tito(start_proxy, fake)
    url = f"{base}/sessions/b/v1/chat/completions"
    reply = httpx.post(url, json={"model": "m", "messages": HI, **fields}, timeout=60)
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error"
    assert error["message"].startswith(message)
    assert generated(fake) == []
    fake.switches.script = [[1, 2]]
    after = httpx.post(url, json={"model": "m", "messages": HI}, timeout=60)
    assert after.headers["x-seedproxy-request-index"] == "0"


ANTHROPIC_TOOL: Any = {"name": "lookup", "description": "Look a word up",
                  "input_schema": LOOKUP["function"]["parameters"]}


def test_anthropic_any_and_tool_force_the_call(
        fake: Fake, start_proxy: Callable[..., str],
        encode: Callable[[str], list[int]]) -> None:
    base = bare(start_proxy, fake)
    fake.switches.script = [encode(CALL), encode(CALL)]
    client = anthropic.Anthropic(base_url=base, api_key="x", max_retries=0)
    choices: list[Any] = [
        {"type": "any"}, {"type": "tool", "name": "lookup", "disable_parallel_tool_use": True}]
    for choice in choices:
        message = client.messages.create(
            model="m", max_tokens=64, messages=[{"role": "user", "content": "The sea?"}],
            tools=[ANTHROPIC_TOOL], tool_choice=choice)
        assert message.stop_reason == "tool_use"
        [block] = message.content
        assert block.type == "tool_use" and block.name == "lookup"
        assert block.input == {"word": "sea"}
    any_, named = generated(fake)
    assert any_["sampling_params"]["json_schema"] == (
        '{"type": "array", "minItems": 1, "items": {"type": "object", "anyOf": ['
        + LOOKUP_ITEM + "]}}")
    # disable_parallel_tool_use is parallel_tool_calls: false, so at most one call.
    assert named["sampling_params"]["json_schema"] == NAMED_SINGLE_SCHEMA


def test_anthropic_unknown_tool_is_an_anthropic_400(
        fake: Fake, start_proxy: Callable[..., str]) -> None:
    base = tito(start_proxy, fake)
    reply = httpx.post(f"{base}/v1/messages", timeout=60, json={
        "model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}],
        "tools": [ANTHROPIC_TOOL], "tool_choice": {"type": "tool", "name": "nope"}})
    assert reply.status_code == 400, reply.text
    body = reply.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert "Tool 'nope' not found in tools list." in body["error"]["message"]
    assert generated(fake) == []


def test_responses_named_function_forces_the_call(
        fake: Fake, start_proxy: Callable[..., str],
        encode: Callable[[str], list[int]]) -> None:
    base = bare(start_proxy, fake)
    fake.switches.script = [encode(CALL)]
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="x", max_retries=0)
    tool: Any = {"type": "function", "name": "lookup", **{
        k: v for k, v in LOOKUP["function"].items() if k != "name"}}
    response = client.responses.create(
        model="m", input="The sea?", tools=[tool],
        tool_choice={"type": "function", "name": "lookup"})
    [item] = response.output
    assert item.type == "function_call" and item.name == "lookup"
    assert json.loads(item.arguments) == {"word": "sea"}
    [sent] = generated(fake)
    assert sent["sampling_params"]["json_schema"] == NAMED_SCHEMA


def test_vllm_refuses_a_forced_call_it_cannot_carry(
        vllm: tuple[str, CompatSwitches], start_proxy: Callable[..., str]) -> None:
    url, switches = vllm
    base = start_proxy([url], backend="vllm", token_in_token_out=True, tokenizer=TOKENIZER)
    reply = httpx.post(f"{base}/v1/chat/completions", timeout=60, json={
        "model": "m", "messages": HI, "tools": TOOLS, "tool_choice": "required"})
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "tool_choice"
    assert switches.received == []


LEGACY_TAG = {"type": "structural_tag", "triggers": ["<w>"], "structures": [
    {"begin": "<w>", "end": "</w>", "schema": {"type": "object"}}, {"begin": "<v>", "end": "</v>"}]}


@pytest.mark.parametrize(("fmt", "sent"), [
    # protocol.py to_sampling_params: json.dumps(response_format.model_dump(by_alias=True))
    # of LegacyStructuralTagResponseFormat (fields type, structures, triggers,
    # at_least_one=False; StructuresResponseFormat begin, schema=None, end).
    (LEGACY_TAG, '{"type": "structural_tag", "structures": [{"begin": "<w>", "schema": '
                 '{"type": "object"}, "end": "</w>"}, {"begin": "<v>", "schema": null, '
                 '"end": "</v>"}], "triggers": ["<w>"], "at_least_one": false}'),
    ({**LEGACY_TAG, "at_least_one": True},
     '{"type": "structural_tag", "structures": [{"begin": "<w>", "schema": '
     '{"type": "object"}, "end": "</w>"}, {"begin": "<v>", "schema": null, '
     '"end": "</v>"}], "triggers": ["<w>"], "at_least_one": true}'),
    ({"type": "structural_tag", "format": {"type": "const_string", "value": "hi"}},
     '{"type": "structural_tag", "format": {"type": "const_string", "value": "hi"}}'),
], ids=["legacy", "at-least-one", "format"])
def test_structural_tag_reaches_sglang_as_its_chat_route_writes_it(
        fake: Fake, start_proxy: Callable[..., str], fmt: dict[str, Any], sent: str) -> None:
    base = tito(start_proxy, fake)
    fake.switches.script = [[1, 2]]
    reply = httpx.post(f"{base}/v1/chat/completions", timeout=60,
                       json={"model": "m", "messages": HI, "response_format": fmt})
    assert reply.status_code == 200, reply.text
    [request] = generated(fake)
    assert request["sampling_params"]["structural_tag"] == sent
    assert "json_schema" not in request["sampling_params"]
