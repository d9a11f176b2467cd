"""Bridged answers in front of the embedded engine (tiny model), plain and in
token-in-token-out mode, hold to the published schemas (``tests/schemas``): Responses
objects and events, Messages and their events, a matched stop sequence included."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from seedproxy.engine import RunningEngine
from seedproxy.engine.model import default_gguf_path, gguf_tokenizer_dir
from tests.helpers.strict_schemas import (
    check_message,
    check_message_event,
    check_response,
    check_response_event,
    sse,
)

TEMPLATE = str(Path(__file__).parents[1] / "helpers" / "qwen3_style.jinja")
ASK: list[Any] = [{"role": "user", "content": "Write a short poem about the sea."}]
TOOLS: list[Any] = [{"name": "lookup", "description": "Look a word up",
                     "input_schema": {"type": "object",
                                      "properties": {"word": {"type": "string"}}}}]


@pytest.fixture(params=["plain", "tito"])
def http(request: pytest.FixtureRequest, engine: RunningEngine,
         start_proxy: Callable[..., str]) -> Iterator[httpx.Client]:
    extra: dict[str, Any] = {}
    if request.param == "tito":
        extra = {"token_in_token_out": True,
                 "tokenizer": str(gguf_tokenizer_dir(default_gguf_path())),
                 "chat_template": TEMPLATE, "tool_parser": "hermes", "reasoning_parser": "think"}
    with httpx.Client(base_url=start_proxy([engine.url], **extra), timeout=120) as client:
        yield client


def record(http: httpx.Client, session: str, k: int) -> Any:
    return http.get(f"/sessions/{session}/trajectory").json()["interactions"][k]["response"]


def test_responses_answers_and_events_hold_to_the_schemas(http: httpx.Client) -> None:
    body = {"model": "m", "input": ASK, "max_output_tokens": 8, "temperature": 0.7,
            "tools": [{"type": "function", "name": "lookup", "parameters": {"type": "object"}}]}
    before = int(time.time())
    whole = http.post("/sessions/e-r/v1/responses", json=body)
    assert whole.status_code == 200, whole.text
    check_response(whole.json())
    assert whole.json()["store"] is False and whole.json()["temperature"] == 0.7
    events = sse(http.post("/sessions/e-r/v1/responses", json={**body, "stream": True}).text)
    after = int(time.time())
    for _, event in events:
        check_response_event(event)
    final = events[-1][1]
    assert final["type"] == "response.completed"
    shown = final["response"]
    assert before <= shown["created_at"] <= after
    assert shown["completed_at"] is None or shown["created_at"] <= shown["completed_at"] <= after
    assert record(http, "e-r", 0) == whole.json() and record(http, "e-r", 1) == shown


def test_messages_with_a_matched_stop_sequence_hold_to_the_schema(http: httpx.Client) -> None:
    body: dict[str, Any] = {"model": "m", "max_tokens": 12, "messages": ASK, "tools": TOOLS}
    first = http.post("/sessions/e-m/v1/messages", json=body).json()
    check_message(first)
    assert first["usage"]["output_tokens_details"] == {"thinking_tokens": 0}
    words = first["content"][0]["text"].split()
    stop = words[len(words) // 2]  # the same seed writes the same words up to it again
    again = {"X-Request-Index": "0"}
    stopped = http.post("/sessions/e-m/v1/messages", headers=again,
                        json={**body, "stop_sequences": [stop]})
    message = stopped.json()
    check_message(message)
    assert (message["stop_reason"], message["stop_sequence"]) == ("stop_sequence", stop)
    assert message["stop_details"] is None and message["container"] is None
    events = sse(http.post("/sessions/e-m/v1/messages", headers=again,
                           json={**body, "stop_sequences": [stop], "stream": True}).text)
    for _, event in events:
        check_message_event(event)
    delta = [e for _, e in events if e["type"] == "message_delta"][0]["delta"]
    assert (delta["stop_reason"], delta["stop_sequence"], delta["stop_details"]) == (
        "stop_sequence", stop, None)
    interactions = http.get("/sessions/e-m/trajectory").json()["interactions"]
    assert len(interactions) == 3
    for interaction in interactions:
        check_message(interaction["response"])
