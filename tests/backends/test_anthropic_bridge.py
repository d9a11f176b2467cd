"""The Messages <-> chat translation itself: fields the fake upstream never exercises."""

from __future__ import annotations

from typing import Any

import pytest

from seedproxy.bridges.anthropic import to_chat
from seedproxy.bridges.anthropic_events import MessageEvents, to_message
from seedproxy.errors import BadRequest
from tests.helpers.strict_schemas import check_message, check_message_event

ASK: list[Any] = [{"role": "user", "content": "hi"}]


def answer(finish: str, matched: Any = None, **message: Any) -> dict[str, Any]:
    choice = {
        "index": 0,
        "finish_reason": finish,
        "matched_stop": matched,
        "message": {"role": "assistant", **message},
    }
    return {
        "id": "x",
        "model": "up",
        "choices": [choice],
        "usage": {
            "prompt_tokens": 3,
            "completion_tokens": 2,
            "prompt_tokens_details": {"cached_tokens": 1},
        },
    }


def test_stop_reasons_and_usage() -> None:
    body = {"model": "m", "max_tokens": 5, "messages": ASK, "stop_sequences": ["END"]}
    matched = to_message(body, answer("stop", "END", content="a"), seed=1)
    assert (matched["stop_reason"], matched["stop_sequence"]) == ("stop_sequence", "END")
    assert to_message(body, answer("stop", 2, content="a"), 1)["stop_reason"] == "end_turn"
    assert to_message(body, answer("length", content="a"), 1)["stop_reason"] == "max_tokens"
    assert matched["usage"] == {
        "input_tokens": 3,
        "output_tokens": 2,
        "output_tokens_details": {"thinking_tokens": 0},
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 1,
        "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
        "server_tool_use": None,
        "inference_geo": None,
        "service_tier": "standard",
    }
    assert matched["model"] == "m"


def test_ids_follow_the_seed_and_the_turn() -> None:
    body = {"model": "m", "max_tokens": 5, "messages": ASK}
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "[1]"}}
    one = to_message(body, answer("tool_calls", tool_calls=[call]), seed=7)
    again = to_message(body, {**answer("tool_calls", tool_calls=[call]), "id": "other"}, seed=7)
    later = to_message({**body, "messages": ASK * 3}, answer("tool_calls", tool_calls=[call]), 7)
    assert one["id"] == again["id"] and one["content"] == again["content"]
    assert one["content"][0]["id"] != later["content"][0]["id"]
    assert one["content"][0]["input"] == {"_raw_arguments": "[1]"}  # not an object: kept whole


def test_request_fields_carried_over() -> None:
    chat = to_chat(
        {
            "model": "m",
            "max_tokens": 9,
            "stream": True,
            "top_k": 3,
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "image",
                            "source": {"type": "base64", "media_type": "image/png", "data": "QQ=="},
                        },
                        {"type": "text", "text": "what is it?"},
                    ],
                }
            ],
            "tools": [{"name": "f", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
            "output_config": {
                "effort": "low",
                "format": {"type": "json_schema", "schema": {"type": "object"}},
            },
        }
    )
    assert chat["messages"][0]["content"][0] == {
        "type": "image_url",
        "image_url": {"url": "data:image/png;base64,QQ=="},
    }
    assert (chat["tool_choice"], chat["parallel_tool_calls"], chat["top_k"]) == (
        "required",
        False,
        3,
    )
    assert chat["response_format"]["json_schema"]["schema"] == {"type": "object"}
    assert chat["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize(
    "bad",
    [
        {"max_tokens": 5, "messages": []},
        {"max_tokens": "5", "messages": ASK},
        {"max_tokens": 5, "messages": [{"role": "tool", "content": "x"}]},
        {"max_tokens": 5, "messages": ASK, "tools": [{"name": "bash", "type": "bash_20250124"}]},
        {"max_tokens": 5, "messages": ASK, "tool_choice": {"type": "sometimes"}},
        {"max_tokens": 5, "messages": ASK, "stop_sequences": "END"},
        {"max_tokens": 5, "messages": ASK, "system": [{"type": "image"}]},
    ],
)
def test_untranslatable_requests_are_400s(bad: dict[str, Any]) -> None:
    with pytest.raises(BadRequest):
        to_chat(bad)


def test_events_without_any_chunk_still_make_a_whole_message() -> None:
    writer = MessageEvents({"model": "m", "max_tokens": 5, "messages": ASK}, seed=3)
    kinds = [e["type"] for e in writer.finish()]
    assert kinds == ["message_start", "ping", "message_delta", "message_stop"]
    result = writer.result()
    assert result is not None and result["content"] == [] and result["stop_reason"] == "end_turn"


def test_a_refusal_says_so_in_stop_details_as_anthropics_schema_has_it() -> None:
    body = {"model": "m", "max_tokens": 5, "messages": ASK}
    refused = to_message(body, answer("content_filter", content="no"), seed=1)
    check_message(refused)
    assert refused["stop_reason"] == "refusal"
    assert refused["stop_details"] == {"type": "refusal", "category": None, "explanation": None}
    writer = MessageEvents(body, seed=1)
    events = writer.feed({"id": "x", "choices": [
        {"index": 0, "delta": {"content": "no"}, "finish_reason": "content_filter"}]})
    events += writer.finish()
    for event in events:
        check_message_event(event)
    delta = [e for e in events if e["type"] == "message_delta"][0]["delta"]
    assert delta["stop_details"] == refused["stop_details"]
