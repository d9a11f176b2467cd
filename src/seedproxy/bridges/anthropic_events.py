"""Streamed chat chunks -> Anthropic's Messages streaming events.

Sequence (what the anthropic SDK's ``messages.stream`` accumulates): ``message_start``,
``ping``, then per content block ``content_block_start`` -> ``content_block_delta``...
(``thinking_delta`` from the upstream's ``reasoning_content``, ``text_delta``,
``input_json_delta`` for tool arguments) -> ``content_block_stop``; blocks never
interleave (a new kind of delta closes the open block); last ``message_delta``
(stop_reason, stop_sequence, usage) and ``message_stop``. ``result`` is the Message
the events add up to, which ``to_message`` is. Ids (``msg_...``, ``toolu_...``) derive
from the seed when there is one (replays get the same ids), else from the upstream's
own id, never from a clock or randomness.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from ..nesting import too_deep
from ..wire.shapes import reasoning_tokens
from .anthropic import STOP_REASONS
from .chunk import ChunkWalker, whole_chunk

__all__ = ["MessageEvents", "to_message"]


def _hex(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def tool_input(arguments: Any) -> dict[str, Any]:
    """A tool call's JSON arguments as the ``input`` object; arguments that are not a
    JSON object, or nest deeper than ``nesting.MAX_DEPTH`` (a model's broken output), are
    kept whole under ``_raw_arguments``."""
    if not isinstance(arguments, str) or not arguments.strip():
        return {}
    try:
        parsed = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return {"_raw_arguments": arguments}
    if not isinstance(parsed, dict) or too_deep(parsed):
        return {"_raw_arguments": arguments}
    return parsed


def delta_usage(usage: Any) -> dict[str, Any]:
    """``message_delta``'s usage (``MessageDeltaUsage``): token counts, no server tools;
    ``output_tokens_details.thinking_tokens`` the upstream's reasoning tokens (0 where it
    counts none), at most ``output_tokens``."""
    usage = usage if isinstance(usage, dict) else {}
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    return {"input_tokens": int(usage.get("prompt_tokens") or 0),
            "output_tokens": int(usage.get("completion_tokens") or 0),
            "output_tokens_details": {"thinking_tokens": reasoning_tokens(usage)},
            "cache_creation_input_tokens": 0, "cache_read_input_tokens": int(cached),
            "server_tool_use": None}


def message_usage(usage: Any) -> dict[str, Any]:
    """A Message's ``Usage``: the upstream's counts; prefix-cache hits are cache reads,
    and nothing is written to a cache Anthropic's way (``cache_creation`` zeros)."""
    return {**delta_usage(usage),
            "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
            "inference_geo": None, "service_tier": "standard"}


def stop_details(reason: str | None) -> dict[str, Any] | None:
    """A refusal's ``stop_details`` (no category or explanation known), else null."""
    if reason != "refusal":
        return None
    return {"type": "refusal", "category": None, "explanation": None}


class MessageEvents(ChunkWalker):
    """Feed it each chat chunk the client would have seen; it returns the events to send."""

    def __init__(self, body: dict[str, Any], seed: int | None) -> None:
        self._body = body
        self._seed = seed
        self._basis: str | None = None  # of the ids, set by the first chunk
        self._model = body.get("model") if isinstance(body.get("model"), str) else None
        self._blocks: list[dict[str, Any]] = []
        self._open: str | None = None  # "thinking", "text" or "tool:<chat index>"
        self._arguments: dict[int, str] = {}  # content index -> raw tool arguments
        self._calls = 0
        self._finish: Any = None
        self._matched: Any = None
        self._usage: Any = None
        self._final: dict[str, Any] | None = None

    def _start(self, chunk: dict[str, Any]) -> list[dict[str, Any]]:
        # The turn (how many messages came in) keeps ids distinct under a fixed seed.
        turn = len(self._body.get("messages") or [])
        self._basis = (f"seed:{self._seed}:{turn}" if self._seed is not None
                       else f"upstream:{chunk.get('id')}")
        if self._model is None:
            self._model = chunk.get("model")
        return [{"type": "message_start", "message": self._envelope(None, None)},
                {"type": "ping"}]

    def _envelope(self, reason: str | None, sequence: str | None) -> dict[str, Any]:
        assert self._basis is not None
        return {"id": "msg_" + _hex(self._basis), "type": "message", "role": "assistant",
                "model": self._model if isinstance(self._model, str) else "", "content": [],
                "container": None, "stop_reason": reason, "stop_sequence": sequence,
                "stop_details": stop_details(reason), "usage": message_usage(self._usage)}

    def feed(self, chunk: dict[str, Any]) -> list[dict[str, Any]]:
        events = self._start(chunk) if self._basis is None else []
        if chunk.get("usage") is not None:
            self._usage = chunk["usage"]
        return events + self._walk(chunk)

    def _on_reasoning(self, piece: str) -> list[dict[str, Any]]:
        return self._delta("thinking", {"type": "thinking_delta", "thinking": piece}, piece)

    def _on_text(self, piece: str, choice: dict[str, Any]) -> list[dict[str, Any]]:
        return self._delta("text", {"type": "text_delta", "text": piece}, piece)

    def _on_finish(self, choice: dict[str, Any]) -> None:
        self._finish = choice["finish_reason"]
        self._matched = choice.get("matched_stop")

    def _close(self) -> list[dict[str, Any]]:
        if self._open is None:
            return []
        self._open = None
        return [{"type": "content_block_stop", "index": len(self._blocks) - 1}]

    def _open_block(self, key: str, block: dict[str, Any]) -> list[dict[str, Any]]:
        events = self._close()
        self._open = key
        self._blocks.append(block)
        shown = dict(block, input={}) if block["type"] == "tool_use" else dict(block)
        events.append({"type": "content_block_start", "index": len(self._blocks) - 1,
                       "content_block": shown})
        return events

    def _delta(self, kind: str, delta: dict[str, Any], piece: str) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        if self._open != kind:
            empty = ({"type": "thinking", "thinking": "", "signature": ""} if kind == "thinking"
                     else {"type": "text", "text": "", "citations": None})
            events.extend(self._open_block(kind, empty))
        self._blocks[-1][kind] += piece
        events.append({"type": "content_block_delta", "index": len(self._blocks) - 1,
                       "delta": delta})
        return events

    def _on_call(self, call: dict[str, Any]) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        key = f"tool:{call.get('index', 0)}"
        function = call.get("function") or {}
        if self._open != key:  # the model itself made the call (``caller: direct``)
            block = {"type": "tool_use", "id": "toolu_" + _hex(f"{self._basis}:{self._calls}"),
                     "name": function.get("name") or "", "input": {},
                     "caller": {"type": "direct"}}
            self._calls += 1
            events.extend(self._open_block(key, block))
        position = len(self._blocks) - 1
        arguments = function.get("arguments")
        if isinstance(arguments, str) and arguments:
            self._arguments[position] = self._arguments.get(position, "") + arguments
            events.append({"type": "content_block_delta", "index": position,
                           "delta": {"type": "input_json_delta", "partial_json": arguments}})
        return events

    def finish(self) -> list[dict[str, Any]]:
        """Close the open block and end the message; call once, at the end."""
        events = self._start({}) if self._basis is None else []
        events.extend(self._close())
        for position, raw in self._arguments.items():
            self._blocks[position]["input"] = tool_input(raw)
        reason, sequence = STOP_REASONS.get(str(self._finish), "end_turn"), None
        stops = self._body.get("stop_sequences") or []
        if self._finish == "stop" and isinstance(self._matched, str) and self._matched in stops:
            reason, sequence = "stop_sequence", self._matched
        events.append({"type": "message_delta",
                       "delta": {"stop_reason": reason, "stop_sequence": sequence,
                                 "stop_details": stop_details(reason), "container": None},
                       "usage": delta_usage(self._usage)})
        events.append({"type": "message_stop"})
        self._final = self._envelope(reason, sequence)
        self._final["content"] = self._blocks
        return events

    def result(self) -> dict[str, Any] | None:
        """The whole Message once finished; before that, what arrived so far (with no
        stop_reason), or None when nothing did."""
        if self._final is not None or self._basis is None:
            return self._final
        partial = self._envelope(None, None)
        partial["content"] = self._blocks
        return partial


def to_message(body: dict[str, Any], answer: dict[str, Any], seed: int | None) -> dict[str, Any]:
    """The Message for a (non-streaming) chat ``answer`` to ``to_chat(body)``."""
    choices = answer.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise TypeError("a chat answer without choices")
    whole = choices[0].get("message")
    if not isinstance(whole, dict):
        raise TypeError("a chat choice without a message")
    events = MessageEvents(body, seed)
    events.feed(whole_chunk(answer, choices[0], whole))
    events.finish()
    message = events.result()
    assert message is not None
    return message
