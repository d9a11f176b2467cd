"""Chat chunks walked into a bridge's events, and a whole chat answer as the one chunk
that carries all of it, so that a bridge builds its non-streamed object as the sum of
the events it streams."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["ChunkWalker", "whole_chunk"]


def whole_chunk(answer: dict[str, Any], choice: dict[str, Any],
                message: dict[str, Any]) -> dict[str, Any]:
    """``answer``'s ``choice`` (its ``message``) as choice 0 of one chunk; each tool
    call is indexed by its position."""
    calls = [dict(call, index=k) for k, call in enumerate(message.get("tool_calls") or [])]
    delta = {"reasoning_content": message.get("reasoning_content"),
             "content": message.get("content"), "tool_calls": calls}
    return {"id": answer.get("id"), "created": answer.get("created"),
            "model": answer.get("model"), "usage": answer.get("usage"),
            "choices": [{"index": 0, "delta": delta, "logprobs": choice.get("logprobs"),
                         "finish_reason": choice.get("finish_reason"),
                         "matched_stop": choice.get("matched_stop")}]}


class ChunkWalker:
    """Walks choice 0 of each chunk (other choices are not shown): its non-empty
    reasoning, then its non-empty content, then its tool call deltas, then its finish."""

    _on_reasoning: Callable[[str], list[dict[str, Any]]]
    _on_text: Callable[[str, dict[str, Any]], list[dict[str, Any]]]
    _on_call: Callable[[dict[str, Any]], list[dict[str, Any]]]
    _on_finish: Callable[[dict[str, Any]], None]

    def _walk(self, chunk: dict[str, Any]) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            reasoning = delta.get("reasoning_content")
            if isinstance(reasoning, str) and reasoning:
                events.extend(self._on_reasoning(reasoning))
            piece = delta.get("content")
            if isinstance(piece, str) and piece:
                events.extend(self._on_text(piece, choice))
            for call in delta.get("tool_calls") or []:
                if isinstance(call, dict):
                    events.extend(self._on_call(call))
            if choice.get("finish_reason") is not None:
                self._on_finish(choice)
        return events
