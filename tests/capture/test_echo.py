"""An answer's echoed prompt ids read past the known part equal a plain parse.

``loads_echoed`` must give what ``orjson.loads`` + ``ints`` give for every answer:
when the known text matches at a token boundary it returns the ids as a ``TokenIds``
(the fast path, checked here so a broken cut cannot pass as a plain parse), and for
every other answer the plain parse. A passthrough rollout through a real proxy then
records exactly the prompt ids the fake SGLang echoed, turn after turn.
"""

from __future__ import annotations

from array import array
from typing import Any

import httpx
import orjson
import pytest

from seedproxy.dialects.echo import loads_echoed
from seedproxy.sessions.token_ids import TokenIds
from seedproxy.wire.shapes import ints
from tests.conftest import Fake
from tests.helpers.fake_sglang import chat_prompt, tokenize

KNOWN = TokenIds(array("i", [5, 17, 230, 4]))


def _answer(prompt: Any, **extra: Any) -> bytes:
    choice = {"index": 0, "message": {"role": "assistant", "content": "hi"},
              "prompt_token_ids": prompt, "finish_reason": "stop"}
    return orjson.dumps({"id": "x", "choices": [choice], **extra})


def _prompt(answer: Any) -> Any:
    value = answer["choices"][0].get("prompt_token_ids")
    return value.tolist() if isinstance(value, TokenIds) else value


@pytest.mark.parametrize(("prompt", "fast"), [
    ([5, 17, 230, 4, 9, 11], True),  # the known ids, then more
    ([5, 17, 230, 4], True),  # exactly the known ids
    ([5, 17, 230, 41, 9], False),  # "4" then "1": not at a token boundary
    ([5, 17, 231, 4, 9], False),  # other ids
    ([5, 17], False),  # shorter than the known ids
    ([5, 17, 230, 4, -3], False),  # the rest is not token ids: ints() refuses the whole
    ([5, 17, 230, 4, True], False),
    ([5, 17, 230, 4, 2**31], False),
    ([5, 17, 230, 4, 1.0], False),
])
def test_an_echoed_prompt_reads_as_a_plain_parse(prompt: list[Any], fast: bool) -> None:
    content = _answer(prompt)
    plain = orjson.loads(content)
    got = loads_echoed(content, KNOWN)
    assert isinstance(got["choices"][0]["prompt_token_ids"], TokenIds) is fast
    assert _prompt(got) == plain["choices"][0]["prompt_token_ids"]
    assert {k: v for k, v in got["choices"][0].items() if k != "prompt_token_ids"} == {
        k: v for k, v in plain["choices"][0].items() if k != "prompt_token_ids"}
    if fast:
        ids = got["choices"][0]["prompt_token_ids"]
        assert ids.ids.tolist() == ints(prompt) and ids.text == orjson.dumps(prompt)[1:-1]


@pytest.mark.parametrize("content", [
    _answer([5, 17, 230, 4, 9], metadata={"prompt_token_ids": [5, 17, 230, 4]}),  # twice
    orjson.dumps({"metadata": {"prompt_token_ids": [5, 17, 230, 4, 9]}, "choices": []}),
    _answer([5, 17, 230, 4, 9], note='"prompt_token_ids":[5,17,230,4,9]'),  # in a string
    orjson.dumps({"choices": [{"prompt_token_ids": "5,17,230,4"}]}),
])
def test_anything_else_is_a_plain_parse(content: bytes) -> None:
    assert loads_echoed(content, KNOWN) == orjson.loads(content)
    assert loads_echoed(content, None) == orjson.loads(content)


@pytest.mark.parametrize("chars_per_token", [1, 4])
def test_a_passthrough_rollout_records_the_prompt_ids_the_upstream_echoed(
        fake: Fake, proxy: str, chars_per_token: int) -> None:
    fake.switches.chars_per_token = chars_per_token
    messages: list[Any] = [{"role": "system", "content": "Be brief."}]
    shown = []
    with httpx.Client(base_url=f"{proxy}/sessions/echo", timeout=60) as http:
        for turn in range(6):
            messages.append({"role": "user", "content": f"step {turn} " + "word " * turn})
            extra = {"return_prompt_token_ids": True} if turn == 5 else {}
            answer = http.post("/v1/chat/completions",
                               json={"model": "m", "messages": messages, "max_tokens": 4,
                                     **extra}).json()
            shown.append(answer["choices"][0].get("prompt_token_ids"))
            messages.append(answer["choices"][0]["message"])
        records = http.get(f"{proxy}/sessions/echo/trajectory").json()["interactions"]
    sent = [b for b in fake.switches.received if "messages" in b]
    expected = [tokenize(chat_prompt(b["messages"]))[::chars_per_token] for b in sent]
    assert [r["prompt_token_ids"] for r in records] == expected
    assert shown == [None] * 5 + [expected[5]]  # echoed to the client only when it asked
