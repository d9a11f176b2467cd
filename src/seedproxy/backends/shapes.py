"""Readers for the OpenAI-compatible answer shapes that several dialects share."""

from __future__ import annotations

from typing import Any

__all__ = ["chat_logprobs", "completion_logprobs", "floats", "ints", "wants"]


def wants(body: dict[str, Any], *keys: str) -> bool:
    """Whether the client itself asked for any of ``keys`` (truthy, or 0 for ints)."""
    for key in keys:
        value = body.get(key)
        if value is True or (isinstance(value, int) and not isinstance(value, bool)):
            return True
    return False


_MAX_TOKEN_ID = 2**31 - 1


def ints(value: Any) -> list[int]:
    """Token ids as sent, or [] when any entry is not one (a recorded sequence is
    either whole or absent, never silently shortened)."""
    if not isinstance(value, list):
        return []
    if all(type(v) is int and 0 <= v <= _MAX_TOKEN_ID for v in value):
        return value
    return []


def floats(values: Any) -> list[float]:
    """Logprobs as sent, or [] when any entry is not a number."""
    if not isinstance(values, list):
        return []
    kinds = set(map(type, values))  # one pass in C, not a generator per value
    if kinds <= _FLOAT:
        return list(values)
    if kinds <= _NUMBER:
        return [float(v) for v in values]
    return []


_FLOAT = frozenset({float})
_NUMBER = frozenset({float, int})


def chat_logprobs(choice: dict[str, Any]) -> list[float]:
    """The sampled tokens' logprobs of a chat choice (or delta), [] when absent."""
    block = choice.get("logprobs")
    if not isinstance(block, dict) or not isinstance(block.get("content"), list):
        return []
    content = block["content"]
    if not all(isinstance(t, dict) for t in content):
        return []
    return floats([t.get("logprob", 0.0) for t in content])


def completion_logprobs(choice: dict[str, Any]) -> list[float]:
    block = choice.get("logprobs")
    if not isinstance(block, dict):
        return []
    return floats([v for v in block.get("token_logprobs") or [] if v is not None])
