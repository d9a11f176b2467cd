"""Token in, token out in front of the fake SGLang, for what a model family brings:
Mistral's 9-character tool-call ids, an end of turn that is an ordinary added token
(Gemma's ``<end_of_turn>``) with the model's ``generation_config`` end ids, Anthropic's
``count_tokens`` answered from the tokenizer, and a ``.gguf`` tokenizer without torch."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

pytest.importorskip("transformers")

from seedproxy.commands.cli import main  # noqa: E402
from seedproxy.engine.model import default_gguf_path, gguf_tokenizer_dir  # noqa: E402
from seedproxy.tito.tools.mistral import mistral_call_id  # noqa: E402
from tests.conftest import Fake  # noqa: E402

TEMPLATE = str(Path(__file__).parents[1] / "helpers" / "qwen3_style.jinja")
TOKENIZER = str(gguf_tokenizer_dir(default_gguf_path()))
EOT = 2  # <|im_end|> in SmolLM2's vocabulary
TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {
    "type": "object", "properties": {"word": {"type": "string"}}}}}]
GEMMA = ("{% for m in messages %}<start_of_turn>{{ 'model' if m['role'] == 'assistant' "
         "else m['role'] }}\n{{ m['content'] }}<end_of_turn>\n{% endfor %}"
         "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")


@pytest.fixture(scope="module")
def tok() -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(TOKENIZER)


def generated(fake: Fake) -> list[dict[str, Any]]:
    return [r for r in fake.received if "input_ids" in r]


def test_mistral_tool_calls_get_nine_character_ids_streamed_and_not(
        fake: Fake, start_proxy: Callable[..., str], tok: Any) -> None:
    base = start_proxy([fake.url], token_in_token_out=True, tokenizer=TOKENIZER,
                       chat_template=TEMPLATE, tool_parser="mistral")
    call = list(tok.encode('[TOOL_CALLS]lookup[ARGS]{"word": "sea"}[TOOL_CALLS]lookup'
                           '[ARGS]{"word": "salt"}', add_special_tokens=False)) + [EOT]
    fake.switches.script = [call, call, list(tok.encode("Salt water.")) + [EOT]]
    client = openai.OpenAI(base_url=f"{base}/sessions/mi/v1", api_key="x", max_retries=0)
    messages: list[Any] = [{"role": "user", "content": "What is the sea?"}]
    whole = client.chat.completions.create(model="m", messages=messages, tools=TOOLS)
    message = whole.choices[0].message
    assert whole.choices[0].finish_reason == "tool_calls"
    assert message.tool_calls is not None
    got = [(c.id, c.function.name, json.loads(c.function.arguments))
           for c in message.tool_calls]
    ids = [c[0] for c in got]
    assert got == [(ids[0], "lookup", {"word": "sea"}), (ids[1], "lookup", {"word": "salt"})]
    assert all(len(i) == 9 and i.isascii() and i.isalnum() for i in ids)
    assert ids == ["8Mjt2kXCw", "diHr7tO6u"]  # derived from the session's answer id
    assert ids == [mistral_call_id(f"{whole.id}:0", k) for k in range(2)]
    streamed = []
    for chunk in client.chat.completions.create(model="m", messages=messages, tools=TOOLS,
                                                stream=True,
                                                extra_headers={"x-request-index": "0"}):
        streamed += chunk.choices[0].delta.tool_calls or []
    assert [(c.id, c.function.name) for c in streamed] == [(i, "lookup") for i in ids]
    messages += [message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": ids[0], "content": "salt water"},
                 {"role": "tool", "tool_call_id": ids[1], "content": "very"}]
    client.chat.completions.create(model="m", messages=messages, tools=TOOLS)
    sent = generated(fake)
    head = sent[0]["input_ids"] + call
    assert sent[2]["input_ids"][: len(head)] == head  # the next turn extends it


def test_kimi_k2_call_ids_count_the_conversation_s_calls(
        fake: Fake, start_proxy: Callable[..., str], tok: Any) -> None:
    base = start_proxy([fake.url], token_in_token_out=True, tokenizer=TOKENIZER,
                       chat_template=TEMPLATE, tool_parser="kimi_k2")

    def section(*words: str) -> list[int]:
        calls = "".join(f'<|tool_call_begin|>functions.lookup:{k}<|tool_call_argument_begin|>'
                        f'{{"word": "{w}"}}<|tool_call_end|>' for k, w in enumerate(words))
        text = f"<|tool_calls_section_begin|>{calls}<|tool_calls_section_end|>"
        return list(tok.encode(text, add_special_tokens=False)) + [EOT]

    fake.switches.script = [section("sea", "salt"), section("tide")]
    client = openai.OpenAI(base_url=f"{base}/sessions/k/v1", api_key="x", max_retries=0)
    messages: list[Any] = [{"role": "user", "content": "What is the sea?"}]
    first = client.chat.completions.create(model="m", messages=messages, tools=TOOLS)
    message = first.choices[0].message
    assert message.tool_calls is not None
    assert [c.id for c in message.tool_calls] == ["functions.lookup:0", "functions.lookup:1"]
    messages += [message.model_dump(exclude_none=True),
                 *[{"role": "tool", "tool_call_id": c.id, "content": "x"}
                   for c in message.tool_calls]]
    second = client.chat.completions.create(model="m", messages=messages, tools=TOOLS)
    assert second.choices[0].message.tool_calls is not None
    assert [c.id for c in second.choices[0].message.tool_calls] == ["functions.lookup:2"]


@pytest.fixture(scope="module")
def gemma_like(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, int]:
    """SmolLM2's tokenizer with ``<end_of_turn>`` as an ordinary (not special) added
    token, and a generation_config naming it and one more id among the end ids."""
    from transformers import AutoTokenizer

    folder = tmp_path_factory.mktemp("gemma-like")
    tok = AutoTokenizer.from_pretrained(TOKENIZER)
    tok.add_tokens(["<end_of_turn>"], special_tokens=False)
    tok.chat_template = GEMMA
    tok.save_pretrained(str(folder))
    eot = tok.convert_tokens_to_ids("<end_of_turn>")
    assert eot not in tok.all_special_ids
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": [EOT, eot, 7]}))
    return str(folder), eot


def test_an_end_of_turn_outside_the_special_ids_never_reaches_content(
        fake: Fake, start_proxy: Callable[..., str], gemma_like: tuple[str, int],
        tok: Any) -> None:
    folder, eot = gemma_like
    base = start_proxy([fake.url], token_in_token_out=True, tokenizer=folder)
    fake.switches.script = [list(tok.encode("Hello there.", add_special_tokens=False)) + [eot]]
    client = openai.OpenAI(base_url=f"{base}/sessions/g/v1", api_key="x", max_retries=0)
    content = "".join(
        chunk.choices[0].delta.content or "" for chunk in client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True))
    assert content == "Hello there."
    # The template's end of turn, the tokenizer's eos, then generation_config's others.
    assert generated(fake)[0]["sampling_params"]["stop_token_ids"] == [eot, EOT, 7]
    turn = httpx.get(f"{base}/sessions/g/trajectory").json()["interactions"][0]
    assert turn["response"]["choices"][0]["message"]["content"] == "Hello there."


def test_count_tokens_in_front_of_an_upstream_counts_the_rendered_prompt(
        fake: Fake, start_proxy: Callable[..., str], tok: Any) -> None:
    base = start_proxy([fake.url], token_in_token_out=True, tokenizer=TOKENIZER,
                       chat_template=TEMPLATE)
    client = anthropic.Anthropic(base_url=base, api_key="x", max_retries=0)
    counted = client.messages.count_tokens(
        model="m", system="Be brief.", messages=[{"role": "user", "content": "Hi there"}])
    rendered = tok.apply_chat_template(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}],
        chat_template=Path(TEMPLATE).read_text(), add_generation_prompt=True, tokenize=False)
    assert counted.input_tokens == len(tok.encode(rendered, add_special_tokens=False))
    bad = httpx.post(f"{base}/v1/messages/count_tokens", json={
        "model": "m", "max_tokens": 1, "messages": [{"role": "robot", "content": "x"}]})
    assert bad.status_code == 400 and bad.json()["type"] == "error"
    assert bad.json()["error"]["type"] == "invalid_request_error"
    assert generated(fake) == []  # counting sends nothing upstream


def test_a_gguf_tokenizer_without_torch_names_the_extra(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # as with only the tito extra
    code = main(["serve", "--upstream", "http://127.0.0.1:9", "--token-in-token-out",
                 "--tokenizer", str(default_gguf_path())])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert "pip install -e '.[engine]'" in err[0] and "torch" in err[0]
