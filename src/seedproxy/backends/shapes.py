"""Readers for the OpenAI-compatible answer shapes that several dialects share."""

from __future__ import annotations

from typing import Any

__all__ = ["chat_logprobs", "completion_logprobs", "ints", "wants"]


def wants(body: dict[str, Any], *keys: str) -> bool:
    """Whether the client itself asked for any of ``keys`` (truthy, or 0 for ints)."""
    for key in keys:
        value = body.get(key)
        if value is True or (isinstance(value, int) and not isinstance(value, bool)):
            return True
    return False


def ints(value: Any) -> list[int]:
    if isinstance(value, list):
        return [v for v in value if isinstance(v, int)]
    return []


def chat_logprobs(choice: dict[str, Any]) -> list[float]:
    """The sampled tokens' logprobs of a chat choice (or delta), [] when absent."""
    block = choice.get("logprobs")
    if not isinstance(block, dict):
        return []
    content = block.get("content") or []
    return [float(t.get("logprob", 0.0)) for t in content if isinstance(t, dict)]


def completion_logprobs(choice: dict[str, Any]) -> list[float]:
    block = choice.get("logprobs")
    if not isinstance(block, dict):
        return []
    return [float(v) for v in block.get("token_logprobs") or [] if v is not None]
