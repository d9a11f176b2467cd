"""Sampling fields of a request, checked: the rules the proxy's token-in-token-out mode
and the engine share.

Invariants:
- A bad value is a ``BadRequest`` (400) naming its field, raised before any work on it.
- Ranges are SGLang's (its messages too): ``frequency_penalty`` and
  ``presence_penalty`` in [-2, 2], ``repetition_penalty`` in (0, 2]; ``logit_bias``
  keys are ASCII token ids in the vocabulary, its values finite numbers.
- A regex must compile with Python's ``re`` (its ``re.error``, ``OverflowError`` and
  ``RecursionError`` are each a 400 here).
- A field left out (or ``null``) is ``None``; each side applies its own default.
"""

from __future__ import annotations

import math
import re
from typing import Any

from .errors import BadRequest

__all__ = ["check_regex", "logit_bias", "number", "penalties", "regexes", "token_ids"]

_KEY_DIGITS = 12


def number(body: dict[str, Any], key: str) -> float | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadRequest(f"{key} must be a number", param=key)
    return float(value)


def penalties(body: dict[str, Any]) -> tuple[float | None, float | None, float | None]:
    """``frequency_penalty``, ``presence_penalty`` and ``repetition_penalty``."""
    found = [number(body, key) for key in ("frequency_penalty", "presence_penalty")]
    for key, value in zip(("frequency_penalty", "presence_penalty"), found, strict=True):
        if value is not None and not -2.0 <= value <= 2.0:
            raise BadRequest(f"{key} must be in [-2, 2], got {value}.", param=key)
    rep = number(body, "repetition_penalty")
    if rep is not None and not 0.0 < rep <= 2.0:
        raise BadRequest(f"repetition_penalty must be in (0, 2], got {rep}.",
                         param="repetition_penalty")
    return found[0], found[1], rep


def logit_bias(value: Any, vocab_size: int) -> tuple[tuple[int, float], ...]:
    """``(token id, bias)`` pairs by token id."""
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise BadRequest("logit_bias must be an object of token id -> bias", param="logit_bias")
    bias: dict[int, float] = {}
    for key, amount in value.items():
        if not (isinstance(key, str) and 0 < len(key) <= _KEY_DIGITS and key.isascii()
                and key.isdigit() and int(key) < vocab_size):
            raise BadRequest(f"logit_bias must has keys in [0, {vocab_size - 1}], "
                             f"got {str(key)[:_KEY_DIGITS]}.", param="logit_bias")
        if isinstance(amount, bool) or not isinstance(amount, int | float) or not (
                math.isfinite(amount)):
            raise BadRequest("logit_bias values must be finite numbers", param="logit_bias")
        bias[int(key)] = float(amount)
    return tuple(sorted(bias.items()))


def check_regex(pattern: str, param: str) -> None:
    try:
        re.compile(pattern)
    except (re.error, OverflowError, RecursionError) as exc:
        shown = pattern if len(pattern) <= 64 else pattern[:64] + "..."
        raise BadRequest(f"{param} {shown!r} is not a valid regex: {exc}",
                         param=param) from None


def regexes(value: Any, param: str) -> list[str]:
    """A regex or a list of them, each compiled once here."""
    patterns = [value] if isinstance(value, str) else value if value is not None else []
    if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
        raise BadRequest(f"{param} must be a regex or a list of regexes", param=param)
    for pattern in patterns:
        check_regex(pattern, param)
    return patterns


def token_ids(value: Any, param: str) -> list[int]:
    """A list of token ids (non-negative integers); a falsy value is none."""
    if not value:
        return []
    if not isinstance(value, list) or not all(type(i) is int and i >= 0 for i in value):
        raise BadRequest(f"{param} must be a list of token ids", param=param)
    return value
