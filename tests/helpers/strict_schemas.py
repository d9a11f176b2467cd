"""Strict validation of bridged answers against the JSON Schemas in ``tests/schemas``
(hand transcriptions of the published specs: each file's ``$comment`` names its source).

``check_response`` / ``check_response_event`` hold a Responses object / stream event to
Open Responses and to OpenAI's own requirements; ``check_message`` /
``check_message_event`` hold a Message / stream event to Anthropic's. Each raises
``jsonschema.ValidationError`` naming the first violation. ``sse`` parses an SSE body.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import jsonschema
import orjson

__all__ = ["check", "check_message", "check_message_event", "check_response",
           "check_response_event", "sse"]

_DIR = Path(__file__).parents[1] / "schemas"

_OPEN_RESPONSES_EVENTS = {
    "response.created": "ResponseLifecycleEvent",
    "response.in_progress": "ResponseLifecycleEvent",
    "response.completed": "ResponseLifecycleEvent",
    "response.failed": "ResponseLifecycleEvent",
    "response.incomplete": "ResponseLifecycleEvent",
    "response.output_item.added": "ResponseOutputItemEvent",
    "response.output_item.done": "ResponseOutputItemEvent",
    "response.content_part.added": "ResponseContentPartEvent",
    "response.content_part.done": "ResponseContentPartEvent",
    "response.output_text.delta": "ResponseOutputTextDeltaStreamingEvent",
    "response.output_text.done": "ResponseOutputTextDoneStreamingEvent",
    "response.reasoning_text.delta": "ResponseReasoningDeltaStreamingEvent",
    "response.reasoning_text.done": "ResponseReasoningDoneStreamingEvent",
    "response.function_call_arguments.delta": "ResponseFunctionCallArgumentsDeltaStreamingEvent",
    "response.function_call_arguments.done": "ResponseFunctionCallArgumentsDoneStreamingEvent",
    "error": "ErrorStreamingEvent",
}
_OPENAI_EVENTS = {
    "response.output_text.delta": "ResponseTextDeltaEvent",
    "response.output_text.done": "ResponseTextDoneEvent",
    "error": "ResponseErrorEvent",
}
_ANTHROPIC_EVENTS = {
    "message_start": "MessageStartEvent",
    "ping": "PingEvent",
    "content_block_start": "ContentBlockStartEvent",
    "content_block_delta": "ContentBlockDeltaEvent",
    "content_block_stop": "ContentBlockStopEvent",
    "message_delta": "MessageDeltaEvent",
    "message_stop": "MessageStopEvent",
    "error": "ErrorResponse",
}


@functools.cache
def _validator(spec: str, name: str) -> jsonschema.Draft202012Validator:
    root = json.loads((_DIR / f"{spec}.json").read_text())
    assert name in root["$defs"], f"{spec}.json has no {name}"
    schema = {**root, "$ref": f"#/$defs/{name}"}
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def check(spec: str, name: str, instance: Any) -> None:
    """``instance`` is a valid ``name`` of ``tests/schemas/{spec}.json``."""
    error = jsonschema.exceptions.best_match(_validator(spec, name).iter_errors(instance))
    if error is not None:
        raise error


def check_response(response: Any) -> None:
    check("open_responses", "ResponseResource", response)
    check("openai_responses", "Response", response)


def check_response_event(event: Any) -> None:
    kind = event.get("type") if isinstance(event, dict) else None
    assert kind in _OPEN_RESPONSES_EVENTS, f"not a Responses stream event: {kind!r}"
    check("open_responses", _OPEN_RESPONSES_EVENTS[kind], event)
    if kind in _OPENAI_EVENTS:
        check("openai_responses", _OPENAI_EVENTS[kind], event)
    if "response" in event:
        check("openai_responses", "Response", event["response"])


def check_message(message: Any) -> None:
    check("anthropic_messages", "Message", message)


def check_message_event(event: Any) -> None:
    kind = event.get("type") if isinstance(event, dict) else None
    assert kind in _ANTHROPIC_EVENTS, f"not a Messages stream event: {kind!r}"
    check("anthropic_messages", _ANTHROPIC_EVENTS[kind], event)


def sse(text: str) -> list[tuple[str | None, Any]]:
    """``(event name, parsed data)`` of each SSE event in ``text``."""
    out: list[tuple[str | None, Any]] = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        name, data = None, []
        for line in block.split("\n"):
            if line.startswith("event:"):
                name = line[len("event:"):].strip()
            elif line.startswith("data:"):
                data.append(line[len("data:"):].strip())
        if data:
            out.append((name, orjson.loads("\n".join(data))))
    return out
