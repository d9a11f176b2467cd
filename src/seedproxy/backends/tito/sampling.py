"""A chat request's sampling fields, checked, for building token-prompt requests."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...errors import BadRequest

__all__ = ["Sampling", "sampling_of"]

_MAX_STOPS = 16

_NEUTRAL: dict[str, tuple[Any, ...]] = {
    "frequency_penalty": (None, 0, 0.0),
    "presence_penalty": (None, 0, 0.0),
    "repetition_penalty": (None, 1, 1.0),
    "logit_bias": (None, {}),
    "regex": (None,),
    "ebnf": (None,),
    "json_schema": (None,),
    "stop_regex": (None,),
    "tool_choice": (None, "auto", "none"),
}
"""Fields this mode does not carry to the token-prompt request, and the values that ask
for nothing: any other value is a 400 naming the field, never silently dropped."""


def _refuse_uncarried(body: dict[str, Any]) -> None:
    for key, neutral in _NEUTRAL.items():
        value = body.get(key)
        if not any(value == n and type(value) is type(n) for n in neutral) and value is not None:
            raise BadRequest(f"{key} is not supported in token-in-token-out mode", param=key)
    fmt = body.get("response_format")
    if fmt is not None and not (isinstance(fmt, dict) and fmt.get("type") == "text"):
        raise BadRequest("response_format is not supported in token-in-token-out mode",
                         param="response_format")


@dataclass(frozen=True, slots=True)
class Sampling:
    max_new_tokens: int | None
    temperature: float | None
    top_p: float | None
    top_k: int | None
    min_p: float | None
    stop: tuple[str, ...]
    stop_token_ids: tuple[int, ...]
    logprobs: bool
    top_logprobs: int


def _number(body: dict[str, Any], key: str) -> float | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadRequest(f"{key} must be a number", param=key)
    return float(value)


def _int(body: dict[str, Any], key: str, low: int) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise BadRequest(f"{key} must be an integer >= {low}", param=key)
    return value


def sampling_of(body: dict[str, Any], stop_token_ids: tuple[int, ...]) -> Sampling:
    """Read ``body``'s sampling fields; ``BadRequest`` names the first bad one, or one
    this mode cannot carry."""
    _refuse_uncarried(body)
    stop = body.get("stop")
    if stop is None:
        stops: tuple[str, ...] = ()
    elif isinstance(stop, str):
        stops = (stop,)
    elif isinstance(stop, list) and len(stop) <= _MAX_STOPS and all(
            isinstance(s, str) and s for s in stop):
        stops = tuple(stop)
    else:
        raise BadRequest(f"stop must be a string or up to {_MAX_STOPS} strings", param="stop")
    extra = body.get("stop_token_ids") or []
    if not isinstance(extra, list) or not all(type(i) is int and i >= 0 for i in extra):
        raise BadRequest("stop_token_ids must be a list of token ids", param="stop_token_ids")
    limit = _int(body, "max_completion_tokens", 1)
    if limit is None:
        limit = _int(body, "max_tokens", 1)
    logprobs = body.get("logprobs")
    if logprobs is not None and not isinstance(logprobs, bool):
        raise BadRequest("logprobs must be a boolean", param="logprobs")
    top = _int(body, "top_logprobs", 0) or 0
    if top > 20:
        raise BadRequest("top_logprobs must be at most 20", param="top_logprobs")
    return Sampling(
        max_new_tokens=limit,
        temperature=_number(body, "temperature"),
        top_p=_number(body, "top_p"),
        top_k=_int(body, "top_k", -1),
        min_p=_number(body, "min_p"),
        stop=stops,
        stop_token_ids=tuple(dict.fromkeys([*stop_token_ids, *extra])),
        logprobs=bool(logprobs),
        top_logprobs=top,
    )
