"""What the chat route hands the template, carried in token-in-token-out mode: the
``chat_template_kwargs``, content-part arrays, ``continue_final_message`` /
``add_generation_prompt``, and assistant tool-call turns (``content: null``, string
``arguments``), each as SGLang's ``serving_chat.py`` prepares them. Checked token for
token against ``apply_chat_template``, through the proxy and the fake SGLang."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

pytest.importorskip("transformers")

from tests.conftest import Fake  # noqa: E402
from tests.helpers.images import png_url  # noqa: E402
from tests.tito.test_contract import EOT, TEMPLATE, TOKENIZER, generated, tito  # noqa: E402

HI = [{"role": "user", "content": "hi"}]
TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {
    "type": "object", "properties": {"word": {"type": "string"}}}}}]


@pytest.fixture(scope="module")
def tok() -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(TOKENIZER)


def ids(tok: Any, text: str) -> list[int]:
    return list(tok.encode(text, add_special_tokens=False))


def render(tok: Any, messages: list[dict[str, Any]], *, qwen: bool = True,
           **kwargs: Any) -> list[int]:
    """What transformers renders, as the proxy should (with the test template or not)."""
    template = open(TEMPLATE).read() if qwen else None
    kwargs.setdefault("add_generation_prompt", True)
    text = tok.apply_chat_template(messages, chat_template=template, tokenize=False, **kwargs)
    return ids(tok, text)


def post(base: str, session: str, **body: Any) -> httpx.Response:
    return httpx.post(f"{base}/sessions/{session}/v1/chat/completions", timeout=60,
                      json={"model": "m", **body})


def bare(start_proxy: Callable[..., str], fake: Fake) -> str:
    """SmolLM2's own template (string content, no tools)."""
    return start_proxy([fake.url], token_in_token_out=True, tokenizer=TOKENIZER)


def lineage(base: str, session: str) -> list[dict[str, Any]]:
    turns = httpx.get(f"{base}/sessions/{session}/trajectory").json()["interactions"]
    return [t["lineage"] for t in turns]


# 1. chat_template_kwargs

def test_enable_thinking_false_reaches_the_template(
        fake: Fake, start_proxy: Callable[..., str], tok: Any) -> None:
    base = tito(start_proxy, fake)
    fake.switches.script = [[1, EOT], [1, EOT]]
    assert post(base, "k", messages=HI).status_code == 200
    reply = post(base, "k2", messages=HI, chat_template_kwargs={"enable_thinking": False})
    assert reply.status_code == 200, reply.text
    plain, off = (r["input_ids"] for r in generated(fake))
    assert off == render(tok, HI, enable_thinking=False) != plain
    assert off[len(plain):] == ids(tok, "<think>\n\n</think>\n\n")


@pytest.mark.parametrize("value", [
    "enable_thinking", [1], 3, {"add_generation_prompt": False}, {"tools": []},
    {"messages": []}, {"x": "y" * 9000},
])
def test_bad_chat_template_kwargs_are_a_400_that_uses_no_index(
        fake: Fake, start_proxy: Callable[..., str], value: Any) -> None:
    base = tito(start_proxy, fake)
    reply = post(base, "bad", messages=HI, chat_template_kwargs=value)
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["param"] == "chat_template_kwargs"
    assert generated(fake) == []
    fake.switches.script = [[1, EOT]]
    assert post(base, "bad", messages=HI).headers["x-seedproxy-request-index"] == "0"


def test_kwargs_carry_into_the_next_turn_and_a_change_is_a_new_branch(
        fake: Fake, start_proxy: Callable[..., str], tok: Any) -> None:
    base = tito(start_proxy, fake)
    off = {"enable_thinking": False}
    first = ids(tok, "Hello.") + [EOT]
    fake.switches.script = [first, [1, EOT], [1, EOT]]
    assert post(base, "t", messages=HI, chat_template_kwargs=off).status_code == 200
    history = [*HI, {"role": "assistant", "content": "Hello."},
               {"role": "user", "content": "more"}]
    assert post(base, "t", messages=history, chat_template_kwargs=off).status_code == 200
    assert post(base, "t", messages=history).status_code == 200  # kwargs dropped
    one, two, three = (r["input_ids"] for r in generated(fake))
    assert two[: len(one) + len(first)] == one + first
    assert two[-8:] == ids(tok, "<|im_start|>assistant\n<think>\n\n</think>\n\n")[-8:]
    assert three == render(tok, history)  # a full render without the kwargs
    turns = lineage(base, "t")
    assert turns[1]["extends"] == {"interaction_id": "i0", "choice": 0}
    assert turns[2]["extends"] is None and turns[2]["forked_from"]["interaction_id"] == "i1"


# 2. content-part arrays

def test_text_parts_are_flattened_for_a_string_template(
        fake: Fake, start_proxy: Callable[..., str], tok: Any) -> None:
    base = bare(start_proxy, fake)
    fake.switches.script = [[1, EOT]]
    parts = [{"type": "text", "text": "Hello"}, {"type": "text", "text": "world"}]
    reply = post(base, "p", messages=[{"role": "system", "content": [parts[0]]},
                                      {"role": "user", "content": parts}])
    assert reply.status_code == 200, reply.text
    want = render(tok, [{"role": "system", "content": "Hello"},
                        {"role": "user", "content": "Hello world"}], qwen=False)
    assert generated(fake)[0]["input_ids"] == want


def test_text_parts_reach_the_qwen_template_too(
        fake: Fake, start_proxy: Callable[..., str], tok: Any) -> None:
    base = tito(start_proxy, fake)
    fake.switches.script = [[1, EOT]]
    reply = post(base, "q", messages=[{"role": "user",
                                       "content": [{"type": "text", "text": "Capital?"}]}])
    assert reply.status_code == 200, reply.text
    assert generated(fake)[0]["input_ids"] == render(tok, [{"role": "user",
                                                            "content": "Capital?"}])


@pytest.mark.parametrize("part", [
    {"type": "image_url", "image_url": {"url": png_url()}},  # a real image: past the gate
    {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}},
])
def test_a_media_part_is_a_400_that_says_so(
        fake: Fake, start_proxy: Callable[..., str], part: dict[str, Any]) -> None:
    base = bare(start_proxy, fake)
    reply = post(base, "m", messages=[{"role": "user", "content": [
        {"type": "text", "text": "What is this?"}, part]}])
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["param"] == "messages" and part["type"] in error["message"]
    assert "text" in error["message"] and generated(fake) == []


# 3. continue_final_message and add_generation_prompt

def test_add_generation_prompt_false_leaves_the_header_out(
        fake: Fake, start_proxy: Callable[..., str], tok: Any) -> None:
    base = bare(start_proxy, fake)
    fake.switches.script = [[1, EOT]]
    assert post(base, "g", messages=HI, add_generation_prompt=False).status_code == 200
    assert generated(fake)[0]["input_ids"] == render(tok, HI, qwen=False,
                                                     add_generation_prompt=False)


def test_a_continued_prefill_is_extended_exactly_in_the_next_turn(
        fake: Fake, start_proxy: Callable[..., str], tok: Any) -> None:
    base = bare(start_proxy, fake)
    question = {"role": "user", "content": "Capital of France?"}
    prefill = {"role": "assistant", "content": "The capital is"}
    completion = ids(tok, " Paris.") + [EOT]
    fake.switches.script = [completion, [1, EOT]]
    first = post(base, "c", messages=[question, prefill], continue_final_message=True)
    assert first.status_code == 200, first.text
    assert first.json()["choices"][0]["message"]["content"] == " Paris."
    history = [question, {"role": "assistant", "content": "The capital is Paris."},
               {"role": "user", "content": "And Germany?"}]
    second = post(base, "c", messages=history)
    assert second.status_code == 200, second.text
    one, two = (r["input_ids"] for r in generated(fake))
    continued = render(tok, [question, prefill], qwen=False, add_generation_prompt=False,
                       continue_final_message=True)
    assert one == continued and one[-1] != EOT
    assert tok.decode(one).endswith("<|im_start|>assistant\nThe capital is")
    assert two[: len(one) + len(completion)] == one + completion
    assert two == render(tok, history, qwen=False)
    assert lineage(base, "c")[1]["extends"] == {"interaction_id": "i0", "choice": 0}


def test_a_continued_turn_extends_an_earlier_one(
        fake: Fake, start_proxy: Callable[..., str], tok: Any) -> None:
    base = bare(start_proxy, fake)
    first = ids(tok, "Paris.") + [EOT]
    fake.switches.script = [first, [1, EOT]]
    assert post(base, "e", messages=HI).status_code == 200
    history = [*HI, {"role": "assistant", "content": "Paris."},
               {"role": "user", "content": "Spell it."}, {"role": "assistant", "content": "P"}]
    reply = post(base, "e", messages=history, continue_final_message=True)
    assert reply.status_code == 200, reply.text
    one, two = (r["input_ids"] for r in generated(fake))
    assert two[: len(one) + len(first)] == one + first
    assert two == render(tok, history, qwen=False, add_generation_prompt=False,
                         continue_final_message=True)
    assert lineage(base, "e")[1]["extends"] == {"interaction_id": "i0", "choice": 0}


@pytest.mark.parametrize(("fields", "messages", "param"), [
    ({"continue_final_message": True, "add_generation_prompt": True},
     [*HI, {"role": "assistant", "content": "So"}], "continue_final_message"),
    ({"continue_final_message": True}, HI, "continue_final_message"),
    ({"continue_final_message": "yes"}, [*HI, {"role": "assistant", "content": "So"}],
     "continue_final_message"),
    ({"add_generation_prompt": 1}, HI, "add_generation_prompt"),
])
def test_a_continuation_that_cannot_be_rendered_is_a_400(
        fake: Fake, start_proxy: Callable[..., str], fields: dict[str, Any],
        messages: list[dict[str, Any]], param: str) -> None:
    base = bare(start_proxy, fake)
    reply = post(base, "x", messages=messages, **fields)
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["param"] == param
    assert generated(fake) == []


# 4. assistant tool-call turns

def test_a_null_content_tool_call_turn_renders(
        fake: Fake, start_proxy: Callable[..., str], tok: Any) -> None:
    base = bare(start_proxy, fake)
    fake.switches.script = [[1, EOT]]
    call = {"id": "call_a", "type": "function",
            "function": {"name": "lookup", "arguments": "{\"word\": \"sea\"}"}}
    messages = [*HI, {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "user", "content": "well?"}]
    reply = post(base, "n", messages=messages)
    assert reply.status_code == 200, reply.text
    want = [*HI, {"role": "assistant", "content": "", "tool_calls": [
        {**call, "function": {"name": "lookup", "arguments": {"word": "sea"}}}]},
        {"role": "user", "content": "well?"}]
    assert generated(fake)[0]["input_ids"] == render(tok, want, qwen=False)


def test_string_arguments_are_parsed_before_rendering(
        fake: Fake, start_proxy: Callable[..., str], tok: Any) -> None:
    base = tito(start_proxy, fake)
    fake.switches.script = [[1, EOT]]
    calls = [{"id": f"call_{k}", "type": "function",
              "function": {"name": "lookup", "arguments": arguments}}
             for k, arguments in enumerate(['{"word":"sea"}', "not json"])]
    messages = [*HI, {"role": "assistant", "content": None, "tool_calls": calls},
                {"role": "tool", "tool_call_id": "call_0", "content": "salt water"},
                {"role": "tool", "tool_call_id": "call_1", "content": "?"}]
    reply = post(base, "a", messages=messages, tools=TOOLS)
    assert reply.status_code == 200, reply.text
    text = tok.decode(generated(fake)[0]["input_ids"])
    assert '"arguments": {"word": "sea"}}' in text  # re-dumped by the template's tojson
    assert '"arguments": not json}' in text  # not JSON: left as the string


def test_passthrough_forwards_the_template_fields_to_sglang_as_sent(
        fake: Fake, start_proxy: Callable[..., str]) -> None:
    """Token-in-token-out off: SGLang's chat route applies them itself, so they reach
    it unchanged."""
    base = start_proxy([fake.url])
    fields = {"continue_final_message": True, "add_generation_prompt": False,
              "chat_template_kwargs": {"enable_thinking": False}}
    messages = [*HI, {"role": "assistant", "content": "Hel"}]
    reply = post(base, "pass", messages=messages, **fields)
    assert reply.status_code == 200, reply.text
    (sent,) = fake.received
    assert {k: sent.get(k) for k in fields} == fields
    assert sent["messages"] == messages
