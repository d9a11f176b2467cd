"""Mistral tool calls in a real tekken tokenizer's ids (mistral-common,
``tests/helpers/tokenizers_mistral.py``), decoded and parsed token by token by the
chain every token-in-token-out answer runs: both formats SGLang's MistralDetector
reads, and the 9-character call ids Mistral's templates require."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mistral_common")

from seedproxy.detokenize import IncrementalDecoder  # noqa: E402
from seedproxy.tito.assistant import AssistantStream  # noqa: E402
from seedproxy.tito.tool_parsers import TOOL_PARSERS  # noqa: E402
from tests.helpers.tokenizers_mistral import assistant_ids, tekken  # noqa: E402

CALLS = [("lookup", '{"word": "sea"}'), ("lookup", '{"word": "naïve [x] {y}"}')]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tekken")


def answer(tokenizer: Any, ids: list[int]) -> tuple[Any, str]:
    from mistral_common.tokens.tokenizers.base import SpecialTokenPolicy

    raw = tokenizer.instruct_tokenizer.tokenizer
    decoder = IncrementalDecoder(lambda part: str(
        raw.decode(part, special_token_policy=SpecialTokenPolicy.KEEP)), frozenset({raw.eos_id}))
    stream = AssistantStream(decoder, None, TOOL_PARSERS["mistral"]())
    shown = "".join(d.text for i in ids for d in stream.feed(i)) + "".join(
        d.text for d in stream.finish())
    return stream.reply, shown


@pytest.mark.parametrize(("version", "content", "wire"), [
    ("v3", None,  # v3 refuses content next to tool calls
     '[TOOL_CALLS][{"name": "lookup", "arguments": {"word": "sea"}, "id": "call00000"}'),
    ("v13", "Let me look.", '[TOOL_CALLS]lookup[ARGS]{"word": "sea"}[TOOL_CALLS]lookup[ARGS]'),
])
def test_tekken_tool_calls_parse_in_both_formats(version: str, content: str | None, wire: str,
                                                 root: Path) -> None:
    from mistral_common.tokens.tokenizers.base import SpecialTokenPolicy

    tokenizer = tekken(version, root)
    ids = assistant_ids(tokenizer, content, CALLS)
    text = tokenizer.instruct_tokenizer.tokenizer.decode(
        ids, special_token_policy=SpecialTokenPolicy.KEEP)
    assert wire in text  # the format this tokenizer version writes
    reply, shown = answer(tokenizer, ids)
    assert tokenizer.instruct_tokenizer.tokenizer.get_special_token("[TOOL_CALLS]") in ids
    assert [(c.name, json.loads(c.arguments)) for c in reply.tool_calls] == [
        (name, json.loads(args)) for name, args in CALLS]
    assert reply.content == shown == (content or "")
    ids_out = [TOOL_PARSERS["mistral"].call_id("chatcmpl-x:0", k) for k in range(2)]
    assert all(len(i) == 9 and i.isalnum() for i in ids_out)


def test_a_tekken_reply_without_calls_is_content(root: Path) -> None:
    tokenizer = tekken("v13", root)
    reply, shown = answer(tokenizer, assistant_ids(tokenizer, "Plain [ARGS] text.", []))
    assert (reply.tool_calls, reply.content, shown) == ([], "Plain [ARGS] text.",
                                                        "Plain [ARGS] text.")
