"""Parsers on real template output (SmolLM2's tokenizer, the Qwen3-style template),
and through the proxy against the fake SGLang: tool calls, reasoning, malformed JSON."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai
import pytest

pytest.importorskip("transformers")

from seedproxy.engine.model import default_gguf_path, gguf_tokenizer_dir  # noqa: E402
from seedproxy.template_input import RenderOptions  # noqa: E402
from seedproxy.tito import Renderer, TitoMode  # noqa: E402
from seedproxy.tito.dialect import GenerateDialect  # noqa: E402
from seedproxy.tito.lineage import Prompt  # noqa: E402
from seedproxy.tito.tool_parsers import TOOL_PARSERS  # noqa: E402
from tests.conftest import Fake  # noqa: E402

TEMPLATE = Path(__file__).parents[1] / "helpers" / "qwen3_style.jinja"
TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {
    "type": "object", "properties": {"word": {"type": "string"}}}}}]


@pytest.fixture(scope="module")
def mode() -> TitoMode:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(gguf_tokenizer_dir(default_gguf_path())))
    return TitoMode(Renderer(tok, TEMPLATE.read_text()), GenerateDialect({}),
                    tool_parser="hermes", reasoning_parser="think")


def sampled(mode: TitoMode, message: dict[str, Any]) -> list[int]:
    """The ids a model would sample for ``message``: what the template writes for it
    after the generation prompt, end-of-turn included."""
    user = [{"role": "user", "content": "hi"}]
    prompt = mode.renderer.full_text(user, TOOLS)
    whole = mode.renderer.full_text([*user, message], TOOLS,
                                    RenderOptions(generation_prompt=False))
    assert whole.startswith(prompt)
    return mode.renderer.encode(whole[len(prompt):].rstrip("\n"))


def parse(mode: TitoMode, ids: list[int]) -> tuple[Any, list[Any]]:
    stream = mode.assistant(Prompt([], False, "", []), {"tools": TOOLS})
    deltas = [d for token in ids for d in stream.feed(token)] + stream.finish()
    return stream.reply, deltas


def test_hermes_calls_and_reasoning_from_the_template(mode: TitoMode) -> None:
    ids = sampled(mode, {"role": "assistant", "content": "Let me look.",
                         "reasoning_content": "Need the word.", "tool_calls": [
                             {"type": "function", "function": {
                                 "name": "lookup", "arguments": {"word": "sea"}}}]})
    reply, deltas = parse(mode, ids)
    assert reply.reasoning == "Need the word."
    assert reply.content == "Let me look."
    assert [(c.name, c.arguments) for c in reply.tool_calls] == [("lookup", '{"word": "sea"}')]
    assert "".join(d.text for d in deltas if d.kind == "content") == reply.content


def test_malformed_tool_json_stays_content(mode: TitoMode) -> None:
    text = 'Calling.\n<tool_call>\n{"name": "lookup", "arguments": {"word": }\n</tool_call>'
    ids = mode.renderer.encode(text + "<|im_end|>")
    reply, _ = parse(mode, ids)
    assert reply.tool_calls == []
    assert reply.content == text


def test_stop_strings_end_the_message(mode: TitoMode) -> None:
    ids = mode.renderer.encode("Hello there END more text<|im_end|>")
    body = {"tools": TOOLS, "stop": ["END"]}
    stream = mode.assistant(Prompt([], False, "", []), body)
    deltas = [d for token in ids for d in stream.feed(token)] + stream.finish()
    assert stream.reply.content == "Hello there"
    assert "".join(d.text for d in deltas) == "Hello there"


def test_split_utf8_decodes_whole(mode: TitoMode) -> None:
    text = "naïve café — 海 🌊"
    reply, deltas = parse(mode, mode.renderer.encode(text))
    assert reply.content == text
    assert "\ufffd" not in "".join(d.text for d in deltas)


@pytest.mark.parametrize(("name", "text", "calls", "content"), [
    ("llama3-json", '{"name": "lookup", "parameters": {"word": "sea"}}',
     [("lookup", '{"word": "sea"}')], ""),
    ("llama3-json", 'The answer is {"a": 1}', [], 'The answer is {"a": 1}'),
    ("llama3-json", '{"name": "lookup", "parameters": ', [], '{"name": "lookup", "parameters":'),
    ("mistral", 'Ok[TOOL_CALLS][{"name": "lookup", "arguments": {"word": "x"}}]',
     [("lookup", '{"word": "x"}')], "Ok"),
    ("mistral", "[TOOL_CALLS][{bad", [], "[TOOL_CALLS][{bad"),
])
def test_other_tool_parsers(name: str, text: str, calls: list[Any], content: str) -> None:
    for pieces in ([text], list(text)):  # whole and one character at a time
        parser = TOOL_PARSERS[name]()
        shown = "".join(parser.feed(p) for p in pieces)
        rest, found = parser.finish()
        assert [(c.name, c.arguments) for c in found] == calls
        assert (shown + rest).strip() == content


@pytest.fixture
def tito_proxy(fake: Fake, start_proxy: Callable[..., str]) -> str:
    return start_proxy(
        [fake.url], token_in_token_out=True,
        tokenizer=str(gguf_tokenizer_dir(default_gguf_path())), chat_template=str(TEMPLATE),
        tool_parser="hermes", reasoning_parser="think")


def test_through_the_proxy_calls_then_malformed_json(
        fake: Fake, tito_proxy: str, mode: TitoMode) -> None:
    call = sampled(mode, {"role": "assistant", "content": "", "reasoning_content": "Look up.",
                          "tool_calls": [{"type": "function", "function": {
                              "name": "lookup", "arguments": {"word": "sea"}}}]})
    broken = mode.renderer.encode('<tool_call>\n{"name": "lookup", "arguments": {"word"'
                                  '\n</tool_call><|im_end|>')
    fake.switches.script = [call, broken]
    client = openai.OpenAI(base_url=f"{tito_proxy}/sessions/p1/v1", api_key="x", max_retries=0)
    messages: list[Any] = [{"role": "user", "content": "What is the sea?"}]
    first = client.chat.completions.create(model="m", messages=messages, tools=TOOLS)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.tool_calls is not None
    assert choice.message.tool_calls[0].function.name == "lookup"
    assert getattr(choice.message, "reasoning_content", None) == "Look up."
    assert first.usage is not None and first.usage.completion_tokens == len(call)
    messages += [choice.message.model_dump(exclude_none=True, exclude={"reasoning_content"}),
                 {"role": "tool", "tool_call_id": choice.message.tool_calls[0].id,
                  "content": "salt water"}]
    second = client.chat.completions.create(model="m", messages=messages, tools=TOOLS)
    assert second.choices[0].finish_reason != "tool_calls"
    assert second.choices[0].message.content is not None
    assert second.choices[0].message.content.startswith("<tool_call>")
    sent = [r for r in fake.received if "input_ids" in r]
    head = sent[0]["input_ids"] + call
    assert sent[1]["input_ids"][: len(head)] == head
    assert sent[1]["sampling_params"]["sampling_seed"] != sent[0]["sampling_params"][
        "sampling_seed"]


def test_a_streamed_tool_call_arrives_whole_with_reasoning_deltas(
        fake: Fake, tito_proxy: str, mode: TitoMode) -> None:
    call = sampled(mode, {"role": "assistant", "content": "Checking.",
                          "reasoning_content": "Look it up.", "tool_calls": [
                              {"type": "function", "function": {
                                  "name": "lookup", "arguments": {"word": "sea"}}}]})
    fake.switches.script = [call, call]
    client = openai.OpenAI(base_url=f"{tito_proxy}/sessions/st/v1", api_key="x", max_retries=0)
    messages: list[Any] = [{"role": "user", "content": "What is the sea?"}]
    content, reasoning, calls, finish = "", "", [], None
    for chunk in client.chat.completions.create(model="m", messages=messages, tools=TOOLS,
                                                stream=True):
        delta = chunk.choices[0].delta
        content += delta.content or ""
        reasoning += getattr(delta, "reasoning_content", None) or ""
        calls += delta.tool_calls or []
        finish = chunk.choices[0].finish_reason or finish
    whole = client.chat.completions.create(model="m", messages=messages, tools=TOOLS,
                                           extra_headers={"x-request-index": "0"})
    message = whole.choices[0].message
    assert (content, reasoning, finish) == ("Checking.", "Look it up.", "tool_calls")
    assert message.content == content and message.reasoning_content == reasoning
    assert message.tool_calls is not None
    assert [(c.id, c.function.name, c.function.arguments) for c in calls] == [
        (c.id, c.function.name, c.function.arguments) for c in message.tool_calls]


@pytest.mark.parametrize("stream", [False, True])
def test_pythonic_calls_through_the_proxy_then_the_next_turn_extends_them(
        stream: bool, fake: Fake, start_proxy: Callable[..., str], mode: TitoMode) -> None:
    """``--tool-parser pythonic`` in front of the scripted upstream: a list of keyword
    calls is two calls (SGLang's PythonicDetector), streamed and not; sent back with its
    tool results, the next prompt extends the sampled ids exactly."""
    base = start_proxy(
        [fake.url], token_in_token_out=True,
        tokenizer=str(gguf_tokenizer_dir(default_gguf_path())), chat_template=str(TEMPLATE),
        tool_parser="pythonic")
    call = mode.renderer.encode('Checking. [lookup(word="sea"), lookup(word="salt", n=2)]'
                                "<|im_end|>")
    fake.switches.script = [call, mode.renderer.encode("Both found.<|im_end|>")]
    client = openai.OpenAI(base_url=f"{base}/sessions/py/v1", api_key="x", max_retries=0)
    messages: list[Any] = [{"role": "user", "content": "Look up sea and salt."}]
    if stream:
        calls: dict[int, Any] = {}
        content, finish = "", None
        for chunk in client.chat.completions.create(model="m", messages=messages, tools=TOOLS,
                                                    stream=True):
            for choice in chunk.choices:
                content += choice.delta.content or ""
                for tc in choice.delta.tool_calls or []:
                    calls[tc.index] = tc
                finish = choice.finish_reason or finish
        got = [(c.id, c.function.name, c.function.arguments) for _, c in sorted(calls.items())]
    else:
        reply = client.chat.completions.create(model="m", messages=messages, tools=TOOLS)
        content, finish = reply.choices[0].message.content or "", reply.choices[0].finish_reason
        got = [(c.id, c.function.name, c.function.arguments)
               for c in reply.choices[0].message.tool_calls or []]
    assert finish == "tool_calls" and content.strip() == "Checking."
    assert [(name, json.loads(args)) for _, name, args in got] == [
        ("lookup", {"word": "sea"}), ("lookup", {"word": "salt", "n": 2})]
    messages.append({"role": "assistant", "content": content, "tool_calls": [
        {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
        for i, n, a in got]})
    messages += [{"role": "tool", "tool_call_id": i, "content": "found"} for i, _, _ in got]
    second = client.chat.completions.create(model="m", messages=messages, tools=TOOLS)
    assert second.choices[0].message.content == "Both found."
    sent = [r["input_ids"] for r in fake.received if "input_ids" in r]
    assert sent[1][:len(sent[0]) + len(call)] == sent[0] + call
