"""Exact, or named: every token-in-token-out turn records how its prompt was made.

A client that resends its history byte for byte gets ``extended``; one that resends it
re-serialised (arguments compacted, ``null`` content as ``""``, reasoning dropped, ids
and ``cache_control`` changed) gets ``matched`` with the names of the matchers that
mapped it; a changed tool result, user message or system prompt is ``rendered`` (a new
branch) with the first message that differs. ``--tito-matchers strict`` turns every
matcher off.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

pytest.importorskip("transformers")

from seedproxy.errors import ConfigError  # noqa: E402
from seedproxy.tito.facets import MATCHERS, differences, entry, matchers_of
from tests.conftest import Fake  # noqa: E402
from tests.helpers.real_tokenizers import family, tokenizer_dir  # noqa: E402
from tests.helpers.scripted_qwen import qwen3_ids  # noqa: E402

TOOLS = [{"type": "function", "function": {
    "name": "lookup", "description": "Look a word up.",
    "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}]
CALL = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "call_1", "type": "function",
     "function": {"name": "lookup", "arguments": '{"q": "sea"}'}}]}


def named(recorded: dict[str, Any], sent: dict[str, Any]) -> list[str] | None:
    found = differences(entry(recorded), entry(sent))
    return None if found is None else sorted(found)


def test_each_normalisation_is_named_and_a_real_edit_is_none() -> None:
    compact = {**CALL, "tool_calls": [{**CALL["tool_calls"][0], "function": {
        "name": "lookup", "arguments": '{"q":"sea"}'}}]}
    assert named(CALL, CALL) == []
    assert named(CALL, compact) == ["tool_arguments_json"]
    assert named(CALL, {**compact, "content": ""}) == ["content_null_empty",
                                                        "tool_arguments_json"]
    assert named(CALL, {**CALL, "tool_calls": [{**CALL["tool_calls"][0], "id": "t9"}]}) == [
        "harness_metadata"]
    said = {"role": "assistant", "content": "Done.", "reasoning_content": "hm"}
    assert named(said, {"role": "assistant", "content": "Done."}) == ["reasoning_dropped"]
    assert named(said, {**said, "reasoning_content": "other"}) is None
    user = {"role": "user", "content": "Find 'sea'."}
    assert named(user, {"role": "user", "content": "Find 'sea'.\n"}) == ["content_whitespace"]
    assert named(user, {"role": "user", "content": [
        {"type": "text", "text": "Find 'sea'.", "cache_control": {"type": "ephemeral"}}]}) == [
        "content_parts", "harness_metadata"]
    assert named(user, {"role": "user", "content": "Find 'ocean'."}) is None
    tool = {"role": "tool", "tool_call_id": "call_1", "content": "salt water"}
    assert named(tool, {**tool, "content": "fresh water"}) is None
    assert named(CALL, {**CALL, "tool_calls": [{**CALL["tool_calls"][0], "function": {
        "name": "lookup", "arguments": '{"q": "lake"}'}}]}) is None


def test_the_mode_setting() -> None:
    assert matchers_of("default") == frozenset(MATCHERS)
    assert matchers_of("strict") == frozenset()
    assert matchers_of("tool_arguments_json, content_null_empty") == {
        "tool_arguments_json", "content_null_empty"}
    with pytest.raises(ConfigError, match="unknown --tito-matchers"):
        matchers_of("loose")


def emitted(text: str) -> list[int]:
    return qwen3_ids(family("qwen3"), text)


def chat(base: str, session: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    answer = httpx.post(f"{base}/sessions/{session}/v1/chat/completions", timeout=60, json={
        "model": "m", "messages": messages, "tools": TOOLS, "max_tokens": 64})
    assert answer.status_code == 200, answer.text
    message: dict[str, Any] = answer.json()["choices"][0]["message"]
    return message


def prompts(base: str, session: str) -> list[dict[str, Any]]:
    got = httpx.get(f"{base}/sessions/{session}/trajectory", timeout=60).json()
    return [t["lineage"]["prompt"] for t in got["interactions"]]


def run(base: str, fake: Fake, session: str, resend: Callable[[dict[str, Any]], dict[str, Any]],
        result: str = "salt water") -> None:
    """Turn 0 calls lookup; turn 1 resends the call as ``resend`` makes it, with the tool
    result; turn 2 resends turn 1's history byte for byte with its answer."""
    fake.switches.script = [
        emitted('<tool_call>\n{"name": "lookup", "arguments": {"q": "sea"}}\n</tool_call>'),
        emitted("It is salt water."), emitted("Yes.")]
    start = [{"role": "system", "content": "Be brief."},
             {"role": "user", "content": "What is the sea?"}]
    call = chat(base, session, start)
    history = [*start, resend(call),
               {"role": "tool", "tool_call_id": call["tool_calls"][0]["id"], "content": result}]
    answer = chat(base, session, history)
    chat(base, session, [*history, answer, {"role": "user", "content": "Sure?"}])


def compacted(call: dict[str, Any]) -> dict[str, Any]:
    """As opencode resends a call: ``null`` content as ``""``, arguments compacted."""
    calls = [{**c, "function": {**c["function"], "arguments": json.dumps(
        json.loads(c["function"]["arguments"]), separators=(",", ":"))}}
        for c in call["tool_calls"]]
    return {**call, "content": "", "tool_calls": calls}


@pytest.fixture
def tito(fake: Fake, start_proxy: Callable[..., str]) -> Callable[..., str]:
    fake.switches.script_stops = True

    def start(**overrides: Any) -> str:
        return start_proxy([fake.url], token_in_token_out=True,
                           tokenizer=str(tokenizer_dir("qwen3")), tool_parser="hermes",
                           **overrides)
    return start


def test_extended_matched_and_rendered_are_recorded_and_counted(
        fake: Fake, tito: Callable[..., str]) -> None:
    base = tito()
    run(base, fake, "exact", lambda call: call)
    first = {"kind": "rendered", "reason": {"message": None, "what": "first turn"}}
    assert prompts(base, "exact") == [first, {"kind": "extended"}, {"kind": "extended"}]
    run(base, fake, "resent", compacted)
    assert prompts(base, "resent") == [
        first, {"kind": "matched", "matchers": ["content_null_empty", "tool_arguments_json"]},
        {"kind": "extended"}]
    got = httpx.get(f"{base}/sessions/resent/trajectory", timeout=60).json()
    assert got["tito_prompts"] == {"extended": 1, "rendered": 1, "unknown": 0, "matched": {
        "total": 1, "by_matcher": {"content_null_empty": 1, "tool_arguments_json": 1}}}
    metrics = httpx.get(f"{base}/metrics", timeout=60).text
    assert 'seedproxy_tito_prompts_total{kind="extended",matcher=""} 3.0' in metrics
    assert ('seedproxy_tito_prompts_total{kind="matched",matcher="tool_arguments_json"} 1.0'
            in metrics)


def test_a_changed_tool_result_or_system_prompt_is_a_new_branch(
        fake: Fake, tito: Callable[..., str]) -> None:
    """A changed tool result matches no turn that saw the old one: the request continues
    the turn before it (a second continuation: a new branch, exact from there); a
    changed system prompt continues none (rendered, with the message that differs)."""
    base = tito()
    run(base, fake, "edit", lambda call: call)
    fake.switches.script = [emitted("Then it is fresh."), emitted("Ok.")]
    got = httpx.get(f"{base}/sessions/edit/trajectory", timeout=60).json()["interactions"]
    history = got[2]["request"]["messages"]
    chat(base, "edit", [*history[:3], {**history[3], "content": "fresh water"}, *history[4:]])
    chat(base, "edit", [{"role": "system", "content": "Be long."}, *history[1:]])
    got = httpx.get(f"{base}/sessions/edit/trajectory", timeout=60).json()["interactions"]
    assert [t["branch"] for t in got] == ["i0", "i0", "i0", "i3", "i4"]
    assert got[3]["lineage"]["extends"] == {"interaction_id": "i0", "choice": 0}
    assert got[3]["lineage"]["prompt"] == {"kind": "extended"}
    assert got[4]["lineage"]["prompt"] == {"kind": "rendered", "reason": {
        "message": 0, "what": "the system message changed"}}


def test_strict_mode_renders_what_a_matcher_would_have_mapped(
        fake: Fake, tito: Callable[..., str]) -> None:
    base = tito(tito_matchers="strict")
    run(base, fake, "strict", compacted)
    assert prompts(base, "strict")[1] == {"kind": "rendered", "reason": {
        "message": 2, "what": "the assistant message differs by content_null_empty, "
                             "tool_arguments_json (a matcher turned off)"}}
