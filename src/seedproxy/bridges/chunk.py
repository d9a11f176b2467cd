"""A whole chat answer as the one stream chunk that carries all of it, so that a bridge
builds its non-streamed object as the sum of the events it streams."""

from __future__ import annotations

from typing import Any

__all__ = ["whole_chunk"]


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
