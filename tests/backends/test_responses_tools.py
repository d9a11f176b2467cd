"""The Responses bridge with Codex CLI's tool set: a namespace's functions, a freeform
``custom`` tool with a grammar, a hosted ``web_search``; the calls coming back as the
items Codex parses, and Codex's resent history (reasoning with ``encrypted_content:
null``, calls with ``namespace``, ``custom_tool_call`` and its output) as chat."""

from __future__ import annotations

import json
from typing import Any

import pytest

from seedproxy.bridges.responses import left_out_tools, to_chat
from seedproxy.bridges.responses_events import ResponsesEvents, to_response
from seedproxy.errors import BadRequest

GRAMMAR = 'start: begin_patch hunk+ end_patch\nbegin_patch: "*** Begin Patch" LF\n'
SHELL = {"type": "function", "name": "exec_command", "description": "Run a command",
         "strict": False, "parameters": {"type": "object",
                                         "properties": {"cmd": {"type": "string"}}}}
AGENTS = {"type": "namespace", "name": "multi_agent_v1", "description": "Sub-agents.",
          "tools": [{"type": "function", "name": "spawn_agent", "description": "Start one",
                     "strict": False, "parameters": {"type": "object", "properties": {}}}]}
PATCH = {"type": "custom", "name": "apply_patch", "description": "Edit files.",
         "format": {"type": "grammar", "syntax": "lark", "definition": GRAMMAR}}
CODEX_TOOLS = [SHELL, AGENTS, PATCH, {"type": "web_search", "external_web_access": False}]


def codex_body(history: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A request shaped as Codex CLI sends one."""
    return {"model": "m", "stream": True, "tools": CODEX_TOOLS, "tool_choice": "auto",
            "parallel_tool_calls": True, "reasoning": {"summary": "auto"}, "store": False,
            "include": ["reasoning.encrypted_content"], "prompt_cache_key": "k",
            "input": [{"type": "message", "id": "msg_1", "role": "developer",
                       "content": [{"type": "input_text", "text": "be brief"}]},
                      {"type": "message", "id": "msg_2", "role": "user",
                       "content": [{"type": "input_text", "text": "patch it"}]},
                      *(history or [])]}


def test_codex_tools_become_chat_functions_and_hosted_ones_are_left_out() -> None:
    chat = to_chat(codex_body())
    functions = [t["function"] for t in chat["tools"]]
    assert [f["name"] for f in functions] == ["exec_command", "multi_agent_v1__spawn_agent",
                                              "apply_patch"]
    assert functions[0] == {k: SHELL[k] for k in ("name", "description", "parameters",
                                                 "strict")}
    assert functions[1]["parameters"] == AGENTS["tools"][0]["parameters"]  # type: ignore[index]
    patch = functions[2]
    assert patch["parameters"] == {"type": "object", "properties": {"input": {"type": "string"}},
                                   "required": ["input"], "additionalProperties": False}
    assert patch["description"].startswith("Edit files.")
    assert "lark grammar" in patch["description"] and GRAMMAR in patch["description"]
    assert left_out_tools(codex_body()) == ["web_search"]
    assert chat["messages"] == [{"role": "system", "content": "be brief"},
                                {"role": "user", "content": "patch it"}]
    assert chat["parallel_tool_calls"] is True and "store" not in chat


def test_a_namespace_trims_underscores_at_the_join_as_codex_does() -> None:
    body = {"input": "x", "tools": [{"type": "namespace", "name": "mcp__files__",
                                     "tools": [{"type": "function", "name": "__read"}]}]}
    assert to_chat(body)["tools"][0]["function"]["name"] == "mcp__files__read"


def test_the_models_calls_come_back_as_the_items_codex_parses() -> None:
    answer = {"id": "c1", "created": 5, "model": "m", "choices": [{
        "finish_reason": "tool_calls",
        "message": {"role": "assistant", "content": None, "reasoning_content": "think",
                    "tool_calls": [
                        {"id": "call_a", "type": "function", "function": {
                            "name": "multi_agent_v1__spawn_agent", "arguments": "{}"}},
                        {"id": "call_b", "type": "function", "function": {
                            "name": "apply_patch",
                            "arguments": json.dumps({"input": "*** Begin Patch\n"})}},
                        {"id": "call_c", "type": "function", "function": {
                            "name": "exec_command", "arguments": '{"cmd": "ls"}'}}]}}]}
    output = to_response(codex_body(), answer, completed_at=6)["output"]
    assert output[0]["type"] == "reasoning"
    assert output[1] == {"id": "fc_call_a", "type": "function_call", "call_id": "call_a",
                         "name": "spawn_agent", "namespace": "multi_agent_v1",
                         "arguments": "{}", "status": "completed"}
    assert output[2] == {"id": "ctc_call_b", "type": "custom_tool_call", "call_id": "call_b",
                         "name": "apply_patch", "input": "*** Begin Patch\n"}
    assert output[3]["name"] == "exec_command" and "namespace" not in output[3]


def test_codex_resent_history_is_the_chat_the_model_sampled() -> None:
    history = [
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": None,
         "content": [{"type": "reasoning_text", "text": "think"}]},
        {"type": "function_call", "id": "fc_a", "status": "completed", "call_id": "call_a",
         "name": "spawn_agent", "namespace": "multi_agent_v1", "arguments": "{}"},
        {"type": "custom_tool_call", "id": "ctc_b", "status": "completed", "call_id": "call_b",
         "name": "apply_patch", "input": "*** Begin Patch\n"},
        {"type": "function_call_output", "id": "fco_1", "call_id": "call_a", "output": "ok"},
        {"type": "custom_tool_call_output", "call_id": "call_b", "output": "Done!"},
    ]
    messages = to_chat(codex_body(history))["messages"]
    assert messages[2:] == [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_a", "type": "function",
             "function": {"name": "multi_agent_v1__spawn_agent", "arguments": "{}"}},
            {"id": "call_b", "type": "function",
             "function": {"name": "apply_patch",
                          "arguments": json.dumps({"input": "*** Begin Patch\n"})}}]},
        {"role": "tool", "tool_call_id": "call_a", "content": "ok"},
        {"role": "tool", "tool_call_id": "call_b", "content": "Done!"},
    ]


def test_a_streamed_freeform_call_ends_as_one_custom_tool_call_input() -> None:
    events = ResponsesEvents(codex_body(), lambda: 7.0)
    opened = {"index": 0, "id": "call_b", "type": "function",
              "function": {"name": "apply_patch", "arguments": '{"input": "*** '}}
    out = events.feed({"id": "c1", "created": 5, "model": "m",
                       "choices": [{"index": 0, "delta": {"tool_calls": [opened]}}]})
    rest = {"index": 0, "function": {"arguments": 'Begin Patch\\n"}'}}
    out += events.feed({"id": "c1", "choices": [{"index": 0, "delta": {"tool_calls": [rest]},
                                                 "finish_reason": "tool_calls"}]})
    out += events.finish()
    kinds = [e["type"] for e in out]
    assert "response.function_call_arguments.delta" not in kinds
    added = next(e for e in out if e["type"] == "response.output_item.added")
    assert added["item"]["type"] == "custom_tool_call"
    delta = next(e for e in out if e["type"] == "response.custom_tool_call_input.delta")
    done = next(e for e in out if e["type"] == "response.custom_tool_call_input.done")
    assert delta["delta"] == done["input"] == "*** Begin Patch\n"
    item = next(e for e in out if e["type"] == "response.output_item.done")["item"]
    assert item == {"id": "ctc_call_b", "type": "custom_tool_call", "call_id": "call_b",
                    "name": "apply_patch", "input": "*** Begin Patch\n"}
    assert out[-1]["response"]["output"] == [item]


def test_a_streamed_namespaced_call_names_its_namespace() -> None:
    events = ResponsesEvents(codex_body(), lambda: 7.0)
    out = events.feed({"id": "c1", "choices": [{"index": 0, "delta": {"tool_calls": [
        {"index": 0, "id": "call_a", "type": "function",
         "function": {"name": "multi_agent_v1__spawn_agent", "arguments": "{}"}}]}}]})
    out += events.finish()
    item = next(e for e in out if e["type"] == "response.output_item.done")["item"]
    assert (item["name"], item["namespace"], item["arguments"]) == (
        "spawn_agent", "multi_agent_v1", "{}")


@pytest.mark.parametrize("tools,message", [
    ([{"type": "namespace", "name": "ns", "tools": [{"type": "web_search"}]}],
     "a namespace holds function and custom tools, not 'web_search'"),
    ([{"type": "namespace", "tools": []}], "a namespace tool needs a name and a list of tools"),
    (["exec_command"], "each tool must be an object with a string type"),
    ([{"type": "custom"}], "a custom tool needs a name"),
])
def test_a_malformed_tool_is_a_400_on_tools(tools: list[Any], message: str) -> None:
    with pytest.raises(BadRequest) as refused:
        to_chat({"input": "x", "tools": tools})
    assert refused.value.message == message and refused.value.param == "tools"
