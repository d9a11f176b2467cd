"""Token-in-token-out mode with untrusted text: a model's tool-call JSON that Python's
``json`` cannot take (nested past its recursion limit, an integer over 4,300 digits)
stays content, streamed or not, and is recorded; a client's bad history, role, stop or
regex is a 400 that uses no index (nothing recorded, nothing sent)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

pytest.importorskip("transformers")

from tests.conftest import Fake  # noqa: E402
from tests.tito.test_contract import generated, tito  # noqa: E402

TOOLS = [{"type": "function", "function": {
    "name": "lookup", "description": "look a word up",
    "parameters": {"type": "object", "properties": {"word": {"type": "string"}}}}}]
BODY: dict[str, Any] = {"model": "m", "tools": TOOLS,
                        "messages": [{"role": "user", "content": "hi"}]}
DEEP = "<tool_call>\n" + "[" * 1000
LONG_INT = ('<tool_call>\n{"name": "lookup", "arguments": {"word": ' + "7" * 4400
            + "}}\n</tool_call>")
TOO_DEEP = ('<tool_call>\n{"name": "lookup", "arguments": {"word": ' + "[" * 100
            + "]" * 100 + "}}\n</tool_call>")


def _stream_text(http: httpx.Client, session: str) -> tuple[str, list[str]]:
    content, finishes = "", []
    with http.stream("POST", f"/sessions/{session}/v1/chat/completions",
                     json={**BODY, "stream": True}) as response:
        assert response.status_code == 200
        lines = [line for line in response.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    import json

    for line in lines[:-1]:
        chunk = json.loads(line[6:])
        assert "error" not in chunk, chunk
        for choice in chunk["choices"]:
            content += choice["delta"].get("content") or ""
            if choice.get("finish_reason"):
                finishes.append(choice["finish_reason"])
    return content, finishes


def test_the_hermes_parser_keeps_what_json_refuses_as_content() -> None:
    """Whole and fed piece by piece (as a stream is): the same content, no calls. (The
    4,400-digit reply is checked here, not end to end: 4,400 tokens through the fake.)"""
    from seedproxy.tito.tool_parsers import HermesParser

    for text in (DEEP, LONG_INT, TOO_DEEP, '<tool_call>\n{"name": "lookup", "arguments": "'
                 + "[" * 5000 + '"}\n</tool_call>'):
        whole = HermesParser()
        shown = whole.feed(text)
        rest, calls = whole.finish()
        assert (shown + rest, calls) == (text, [])
        pieces = HermesParser()
        shown = "".join(pieces.feed(text[i:i + 7]) for i in range(0, len(text), 7))
        rest, calls = pieces.finish()
        assert (shown + rest, calls) == (text, [])


@pytest.mark.parametrize("text", [DEEP, TOO_DEEP], ids=["deep", "past64"])
def test_tool_json_python_cannot_parse_stays_content(
        fake: Fake, start_proxy: Callable[..., str], encode: Callable[[str], list[int]],
        text: str) -> None:
    base = tito(start_proxy, fake)
    fake.switches.script = [encode(text), encode(text)]
    with httpx.Client(base_url=base, timeout=60) as http:
        whole = http.post("/sessions/w/v1/chat/completions", json=BODY)
        assert whole.status_code == 200, whole.text[:300]
        message = whole.json()["choices"][0]["message"]
        assert not message.get("tool_calls") and message["content"] == text
        assert len(http.get("/sessions/w/trajectory").json()["interactions"]) == 1
        streamed, finishes = _stream_text(http, "st")
        assert streamed == text and finishes and "tool_calls" not in finishes
        assert len(http.get("/sessions/st/trajectory").json()["interactions"]) == 1
        assert http.post("/trajectories/export", json={}).status_code == 200


def _refused(http: httpx.Client, fake: Fake, body: dict[str, Any], param: str) -> None:
    answer = http.post("/sessions/bad/v1/chat/completions", json=body)
    assert answer.status_code == 400, (body, answer.status_code, answer.text[:300])
    assert answer.json()["error"]["param"] == param, answer.json()
    state = http.get("/sessions/bad")
    assert state.status_code == 404 or state.json()["next_index"] == 0
    assert generated(fake) == []


def _history(arguments: str) -> dict[str, Any]:
    return {**BODY, "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "lookup", "arguments": arguments}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sea"}]}


@pytest.mark.parametrize("body,param", [
    (_history("[" * 5000), "messages"),
    (_history('{"word": ' + "9" * 5000 + "}"), "messages"),
    (_history('{"word": ' + "[" * 80 + "]" * 80 + "}"), "messages"),
    ({**BODY, "messages": [{"role": ["user"], "content": "hi"}]}, "messages"),
    ({**BODY, "messages": [{"role": {"r": "user"}, "content": "hi"}]}, "messages"),
    ({**BODY, "stop": ""}, "stop"),
    ({**BODY, "stop": [""]}, "stop"),
    ({**BODY, "regex": "[a-"}, "regex"),
    ({**BODY, "regex": "(" * 2000 + ")" * 2000}, "regex"),
    ({**BODY, "regex": "a{99999999999}"}, "regex"),
    ({**BODY, "stop_regex": "a{99999999999}"}, "stop_regex"),
    ({**BODY, "json_schema": "[" * 5000}, "json_schema"),
], ids=["args-deep", "args-digits", "args-past64", "role-list", "role-object", "stop-empty",
        "stop-list-empty", "regex", "regex-deep", "regex-overflow", "stop-regex-overflow",
        "schema-deep"])
def test_a_clients_bad_input_is_a_400_using_no_index(
        fake: Fake, start_proxy: Callable[..., str], body: dict[str, Any], param: str) -> None:
    base = tito(start_proxy, fake)
    with httpx.Client(base_url=base, timeout=60) as http:
        _refused(http, fake, body, param)
