"""Bridged answers in front of the fake SGLang hold to the published schemas (the strict
JSON Schemas of ``tests/schemas``): every Responses object and stream event, every
Message and Messages stream event, errors included, with tools, with reasoning, streamed
and not; and the values the schemas ask for are true ones."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from tests.conftest import Fake
from tests.helpers.strict_schemas import (
    check,
    check_message,
    check_message_event,
    check_response,
    check_response_event,
    sse,
)

RESPONSE_TOOLS: list[Any] = [{
    "type": "function", "name": "search", "description": "look something up",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
}]
MESSAGE_TOOLS: list[Any] = [{
    "name": "search", "description": "look something up",
    "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}},
}]
ASK = [{"role": "user", "content": "find cats"}]


def responses(http: httpx.Client, session: str, **body: Any) -> httpx.Response:
    return http.post(f"/sessions/{session}/v1/responses",
                     json={"model": "m", "input": ASK, "max_output_tokens": 6, **body})


def messages(http: httpx.Client, session: str, **body: Any) -> httpx.Response:
    return http.post(f"/sessions/{session}/v1/messages",
                     json={"model": "m", "max_tokens": 6, "messages": ASK, **body})


def recorded(http: httpx.Client, session: str) -> Any:
    return http.get(f"/sessions/{session}/trajectory").json()["interactions"][0]["response"]


CASES = {
    "plain": ({}, {}),
    "tools": ({"tools": RESPONSE_TOOLS}, {"tools": MESSAGE_TOOLS}),
    "reasoning": ({}, {}),
    "logprobs": ({"top_logprobs": 2, "include": ["message.output_text.logprobs"]}, None),
    "settings": ({"temperature": 0.5, "top_p": 0.25, "presence_penalty": 0.5,
                  "frequency_penalty": 0.25, "user": "u1", "instructions": "be brief",
                  "metadata": {"k": "v"}, "tool_choice": "required", "tools": RESPONSE_TOOLS,
                  "text": {"format": {"type": "json_schema", "name": "out",
                                      "schema": {"type": "object"}}}},
                 {"temperature": 0.5, "top_p": 0.25, "top_k": 4}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_responses_object_holds_to_both_schemas(
    http: httpx.Client, fake: Fake, case: str
) -> None:
    fake.switches.reasoning = case == "reasoning"
    before = int(time.time())
    answer = responses(http, f"r-{case}", **CASES[case][0])
    after = int(time.time())
    assert answer.status_code == 200, answer.text
    body = answer.json()
    check_response(body)
    if "tools" in CASES[case][0]:  # the model called a tool: its turn is complete
        assert body["status"] == "completed" and body["incomplete_details"] is None
        assert before <= body["created_at"] <= body["completed_at"] <= after
    else:  # 6 tokens of max_output_tokens 6: cut short, never completed
        assert body["status"] == "incomplete" and body["completed_at"] is None
        assert body["incomplete_details"] == {"reason": "max_output_tokens"}
    assert (body["store"], body["background"], body["truncation"]) == (False, False, "disabled")
    assert body["reasoning"] == {"effort": None, "summary": None}
    assert body["max_tool_calls"] is None and body["service_tier"] == "default"
    assert before <= body["created_at"] <= after
    assert body["usage"]["input_tokens_details"] == {"cached_tokens": 0, "cache_write_tokens": 0}
    kinds = [item["type"] for item in body["output"]]
    if case == "tools":
        assert kinds == ["function_call"]
        assert body["tools"] == [{**RESPONSE_TOOLS[0], "strict": None}]
    elif case == "reasoning":
        assert kinds == ["reasoning", "message"]
        words = body["output"][1]["content"][0]["text"].split()
        assert body["output"][0]["content"] == [
            {"type": "reasoning_text", "text": " ".join(reversed(words))}]
        assert body["output"][0]["summary"] == []
    if case == "settings":
        sent = fake.received[0]
        assert (sent["presence_penalty"], sent["frequency_penalty"]) == (0.5, 0.25)
        assert (body["temperature"], body["top_p"]) == (0.5, 0.25)
        assert (body["presence_penalty"], body["frequency_penalty"]) == (0.5, 0.25)
        assert body["user"] == "u1" and body["tool_choice"] == "required"
        assert body["text"] == {"format": {"type": "json_schema", "name": "out",
                                           "description": None,
                                           "schema": {"type": "object"}, "strict": False}}
    else:
        assert (body["temperature"], body["top_p"]) == (1.0, 1.0)
        assert (body["presence_penalty"], body["frequency_penalty"]) == (0.0, 0.0)
        assert body["top_logprobs"] == (2 if case == "logprobs" else 0)
    assert recorded(http, f"r-{case}") == body


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_responses_stream_event_holds_to_both_schemas(
    http: httpx.Client, fake: Fake, case: str
) -> None:
    fake.switches.reasoning = case == "reasoning"
    fake.switches.stop_after = 4  # the model ends its turn: a completed response
    before = int(time.time())
    answer = responses(http, f"rs-{case}", stream=True, **CASES[case][0])
    after = int(time.time())
    events = sse(answer.text)
    for name, event in events:
        assert name == event["type"]
        check_response_event(event)
    assert [e["sequence_number"] for _, e in events] == list(range(len(events)))
    kinds = [e["type"] for _, e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    final = events[-1][1]["response"]
    assert final["status"] == "completed"
    assert before <= final["created_at"] <= final["completed_at"] <= after
    assert events[0][1]["response"]["completed_at"] is None
    if case == "reasoning":
        assert "response.reasoning_text.delta" in kinds
        assert [i["type"] for i in final["output"]] == ["reasoning", "message"]
    assert recorded(http, f"rs-{case}") == final


def test_a_responses_upstream_error_holds_to_openais_error_schema(
    http: httpx.Client, fake: Fake
) -> None:
    fake.switches.fail_next, fake.switches.fail_status = 1, 400
    answer = responses(http, "r-err")
    assert answer.status_code == 400
    check("openai_responses", "ErrorBody", answer.json())


def test_a_responses_stream_that_fails_ends_with_a_schema_error_event(
    http: httpx.Client, fake: Fake
) -> None:
    fake.switches.error_after = 2
    events = sse(responses(http, "rs-err", stream=True).text)
    for _, event in events:
        check_response_event(event)
    last = events[-1][1]
    assert last["type"] == "error" and last["sequence_number"] == len(events) - 1
    assert last["message"] == last["error"]["message"]
    assert last["message"].endswith("injected mid-stream failure")
    assert last["code"] == last["error"]["code"] == "500"
    assert "response.completed" not in [e["type"] for _, e in events]


MESSAGE_CASES = {k: v[1] for k, v in CASES.items() if v[1] is not None}


@pytest.mark.parametrize("case", sorted(MESSAGE_CASES))
def test_a_message_holds_to_anthropics_schema(http: httpx.Client, fake: Fake, case: str) -> None:
    fake.switches.reasoning = case == "reasoning"
    answer = messages(http, f"m-{case}", **MESSAGE_CASES[case])
    assert answer.status_code == 200, answer.text
    body = answer.json()
    check_message(body)
    assert (body["container"], body["stop_details"], body["stop_sequence"]) == (None, None, None)
    assert body["usage"]["cache_creation"] == {"ephemeral_5m_input_tokens": 0,
                                               "ephemeral_1h_input_tokens": 0}
    assert body["usage"]["service_tier"] == "standard"
    kinds = [block["type"] for block in body["content"]]
    if case == "tools":
        assert kinds == ["tool_use"] and body["stop_reason"] == "tool_use"
        assert body["content"][0]["caller"] == {"type": "direct"}
    elif case == "reasoning":
        assert kinds == ["thinking", "text"] and body["content"][1]["citations"] is None
    else:
        assert kinds == ["text"] and body["stop_reason"] == "max_tokens"
    assert recorded(http, f"m-{case}") == body


@pytest.mark.parametrize("case", sorted(MESSAGE_CASES))
def test_every_messages_stream_event_holds_to_anthropics_schema(
    http: httpx.Client, fake: Fake, case: str
) -> None:
    fake.switches.reasoning = case == "reasoning"
    events = sse(messages(http, f"ms-{case}", stream=True, **MESSAGE_CASES[case]).text)
    for name, event in events:
        assert name == event["type"]
        check_message_event(event)
    kinds = [e["type"] for _, e in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    delta = events[-2][1]
    assert delta["delta"]["stop_details"] is None and delta["delta"]["container"] is None
    assert delta["usage"]["output_tokens"] > 0
    final = recorded(http, f"ms-{case}")
    check_message(final)
    assert final["stop_reason"] == delta["delta"]["stop_reason"]
    assert [b["type"] for b in final["content"]] == [
        e["content_block"]["type"] for _, e in events if e["type"] == "content_block_start"]


@pytest.mark.parametrize("patch", [
    {"reasoning_tokens": 3},  # SGLang's top-level count
    {"completion_tokens_details": {"reasoning_tokens": 3}},  # OpenAI's
])
def test_a_message_counts_the_upstreams_reasoning_tokens_as_thinking_tokens(
        http: httpx.Client, fake: Fake, patch: dict[str, Any]) -> None:
    """``usage.output_tokens_details.thinking_tokens`` is the upstream's reasoning count,
    in the Message, in the streamed ``message_delta`` and in what is recorded; 0 in
    ``message_start``, whose counts come with ``message_delta``."""
    fake.switches.reasoning, fake.switches.usage_patch = True, patch
    body = messages(http, "m-think").json()
    check_message(body)
    assert body["usage"]["output_tokens_details"] == {"thinking_tokens": 3}
    assert recorded(http, "m-think")["usage"]["output_tokens_details"] == {"thinking_tokens": 3}
    events = dict(sse(messages(http, "ms-think", stream=True).text))
    assert events["message_start"]["message"]["usage"]["output_tokens_details"] == {
        "thinking_tokens": 0}
    assert events["message_delta"]["usage"]["output_tokens_details"] == {"thinking_tokens": 3}
    fake.switches.reasoning = False
    fake.switches.usage_patch = None
    plain = messages(http, "m-nothink").json()
    assert plain["usage"]["output_tokens_details"] == {"thinking_tokens": 0}


def test_messages_errors_hold_to_anthropics_schema(http: httpx.Client, fake: Fake) -> None:
    fake.switches.fail_next, fake.switches.fail_status = 1, 400
    answer = messages(http, "m-err")
    assert answer.status_code == 400
    check("anthropic_messages", "ErrorResponse", answer.json())
    fake.switches.error_after = 2
    events = sse(messages(http, "ms-err", stream=True).text)
    for _, event in events:
        check_message_event(event)
    assert events[-1][1]["type"] == "error"
    assert "message_stop" not in [e["type"] for _, e in events]
