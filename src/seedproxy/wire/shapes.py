"""Readers for the OpenAI-compatible answer shapes that several dialects share."""

from __future__ import annotations

from typing import Any

import orjson

__all__ = ["chat_logprobs", "completion_logprobs", "floats", "ids_json", "ints",
           "reasoning_tokens", "wants"]


def wants(body: dict[str, Any], key: str) -> bool:
    """Whether the client itself asked for ``key``: true, or any int (0 too)."""
    value = body.get(key)
    return value is True or (isinstance(value, int) and not isinstance(value, bool))


def reasoning_tokens(usage: dict[str, Any]) -> int:
    """The reasoning tokens an OpenAI-style ``usage`` counts: OpenAI's
    ``completion_tokens_details.reasoning_tokens``, else SGLang's top-level
    ``reasoning_tokens``; 0 where neither is a non-negative integer. Never more than
    ``completion_tokens`` where that is an integer."""
    details = usage.get("completion_tokens_details")
    value = details.get("reasoning_tokens") if isinstance(details, dict) else None
    if value is None:
        value = usage.get("reasoning_tokens")
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        return 0
    total = usage.get("completion_tokens")
    return min(value, total) if isinstance(total, int) and total >= 0 else value


_MAX_TOKEN_ID = 2**31 - 1
_CLASSES = bytes(
    ord("d") if 0x30 <= c <= 0x39 else ord(",") if c == 0x2C else ord("!") for c in range(256)
)
"""Each byte of an id list's JSON text as a digit (``d``), a comma, or anything else."""
_TEN_DIGITS = b"d" * 10
"""A number that may pass ``_MAX_TOKEN_ID`` (2147483647 has ten digits)."""


def ints(value: Any) -> list[int]:
    """Token ids as sent, or [] when any entry is not one: an int (not a bool) from 0
    to 2**31 - 1 (a recorded sequence is whole or absent, never shortened).

    Checked on the list's JSON text in a few C passes (an echoed prompt can hold
    millions): only ids leave nothing but digits and commas inside the brackets, and
    the bound is compared only when some number has ten digits. What JSON cannot carry
    as a number (an int over 64 bits, an int subclass) is refused too.
    """
    return value if ids_json(value) is not None else []


def ids_json(value: Any) -> bytes | None:
    """``value``'s JSON text (``b"[1,2]"``) when ``ints`` accepts it as token ids, else
    None: the check ``ints`` makes, keeping the text it makes it on."""
    if not isinstance(value, list):
        return None
    try:
        text = orjson.dumps(value, option=orjson.OPT_PASSTHROUGH_SUBCLASS)
    except orjson.JSONEncodeError:
        return None
    classes = text.translate(_CLASSES)
    if classes.count(b"!") != 2:  # anything but the list's own two brackets
        return None
    if _TEN_DIGITS in classes and max(value) > _MAX_TOKEN_ID:
        return None
    return text


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
_DICT = frozenset({dict})


def chat_logprobs(choice: dict[str, Any]) -> list[float]:
    """The sampled tokens' logprobs of a chat choice (or delta), [] when absent."""
    block = choice.get("logprobs")
    if not isinstance(block, dict) or not isinstance(block.get("content"), list):
        return []
    content = block["content"]
    if not set(map(type, content)) <= _DICT:  # one pass in C, as in ``floats``
        return []
    return floats([t.get("logprob", 0.0) for t in content])


def completion_logprobs(choice: dict[str, Any]) -> list[float]:
    block = choice.get("logprobs")
    if not isinstance(block, dict):
        return []
    return floats([v for v in block.get("token_logprobs") or [] if v is not None])
