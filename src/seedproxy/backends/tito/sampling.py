"""A chat request's sampling fields, checked, for building token-prompt requests.

Invariants:
- Every field is checked for type and range here, before a slot is taken: a bad value
  is a 400 naming the field that uses no index. Ranges are SGLang's (penalties in
  [-2, 2], ``repetition_penalty`` in (0, 2], ``logit_bias`` keys in the vocabulary).
- A field the dialect cannot carry (outside its ``carries``) with a value other than a
  neutral one is a 400 naming it, never dropped; so is a forcing ``tool_choice`` where
  the dialect cannot carry one (its grammar is SGLang's, on ``/generate`` only).
- ``tools`` and ``tool_choice`` are checked as SGLang's chat route checks them
  (``seedproxy.tool_choice``), on every upstream.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ...errors import BadRequest
from ...tool_choice import Forcing, ToolChoiceError, forcing_of
from .constraints import Constraint, check_regex, constraint_of
from .tools.base import ToolParser
from .tools.structural import ToolAsk

__all__ = ["CARRIABLE", "Sampling", "sampling_of"]

_MAX_STOPS = 16

CARRIABLE = frozenset({
    "frequency_penalty", "presence_penalty", "repetition_penalty", "logit_bias", "regex",
    "ebnf", "json_schema", "stop_regex", "response_format", "tool_choice",
})
"""The optional fields a dialect may carry; each dialect says which in ``carries``."""

_NEUTRAL: dict[str, tuple[Any, ...]] = {
    "frequency_penalty": (0, 0.0),
    "presence_penalty": (0, 0.0),
    "repetition_penalty": (1, 1.0),
    "logit_bias": ({},),
    "stop_regex": ([],),
    "response_format": ({"type": "text"},),
    "tool_choice": ("auto", "none"),
}
"""Values that ask for nothing (as does ``None``): a dialect that cannot carry a field
still takes these; any other value is a 400 naming the field, never silently dropped."""


def _refuse_uncarried(body: dict[str, Any], carries: frozenset[str]) -> None:
    for key in sorted(CARRIABLE - carries):
        value = body.get(key)
        neutral = _NEUTRAL.get(key, ())
        if value is not None and not any(value == n and type(value) is type(n)
                                         for n in neutral):
            raise BadRequest(f"{key} is not supported in token-in-token-out mode with "
                             "this upstream", param=key)


def checked_forcing(body: dict[str, Any]) -> Forcing | None:
    """``body``'s forced tool call, if any; a bad ``tools`` or ``tool_choice`` is a 400."""
    try:
        return forcing_of(body)
    except ToolChoiceError as exc:
        raise BadRequest(exc.message, param=exc.param) from None


def _penalty(body: dict[str, Any], key: str, low: float, high: float,
             open_low: bool = False) -> float | None:
    value = _number(body, key)
    if value is not None and not (low < value <= high if open_low else low <= value <= high):
        span = f"({low:g}, {high:g}]" if open_low else f"[{low:g}, {high:g}]"
        raise BadRequest(f"{key} must be in {span}", param=key)
    return value


def _logit_bias(body: dict[str, Any], vocab_size: int) -> tuple[tuple[int, float], ...]:
    value = body.get("logit_bias")
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise BadRequest("logit_bias must be an object of token id -> bias", param="logit_bias")
    bias: dict[int, float] = {}
    for key, amount in value.items():
        if not (isinstance(key, str) and 0 < len(key) <= 12 and key.isascii()
                and key.isdigit() and int(key) < vocab_size):
            raise BadRequest(f"logit_bias keys must be token ids in [0, {vocab_size - 1}]",
                             param="logit_bias")
        if isinstance(amount, bool) or not isinstance(amount, int | float) or not (
                math.isfinite(amount)):
            raise BadRequest("logit_bias values must be finite numbers", param="logit_bias")
        bias[int(key)] = float(amount)
    return tuple(bias.items())


def _stop_regex(body: dict[str, Any]) -> tuple[str, ...]:
    value = body.get("stop_regex")
    patterns = [value] if isinstance(value, str) else value if value is not None else []
    if not isinstance(patterns, list) or len(patterns) > _MAX_STOPS or not all(
            isinstance(p, str) and p for p in patterns):
        raise BadRequest(f"stop_regex must be a regex or up to {_MAX_STOPS} regexes",
                         param="stop_regex")
    for pattern in patterns:
        check_regex(pattern, "stop_regex")
    return tuple(patterns)



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
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    repetition_penalty: float | None = None
    logit_bias: tuple[tuple[int, float], ...] = ()
    stop_regex: tuple[str, ...] = ()
    constraint: Constraint | None = None
    forcing: Forcing | None = None
    """``tool_choice`` forces a call: the reply is read as SGLang reads a forced one
    (the tool parser's format where ``constraint`` is its structural tag, else the
    JSON array)."""
    ignore_eos: bool = False
    """Generate past the end of the turn: the template's stop ids are not sent (only the
    client's ``stop_token_ids``), and the upstream ignores its own EOS."""
    require_reasoning: bool = False
    """A reasoning parser is on: SGLang's chat route then leaves the reasoning free and
    starts a constraint after it (``require_reasoning`` on ``/generate``)."""


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


def _tool_tag(body: dict[str, Any], forcing: Forcing | None,
              tool_parser: type[ToolParser] | None, think: tuple[str, ...]) -> str | None:
    """The tool parser's structural tag for ``body``'s calls, if it builds one."""
    tools = body.get("tools")
    if tool_parser is None or not tools or body.get("tool_choice") == "none":
        return None
    return tool_parser.structural_tag(ToolAsk(
        tools, forced=forcing is not None, named=forcing.name if forcing else None,
        parallel=body.get("parallel_tool_calls") is not False, think=think))


def sampling_of(body: dict[str, Any], stop_token_ids: tuple[int, ...], *,
                carries: frozenset[str], vocab_size: int,
                reasoning: bool = False, tool_parser: type[ToolParser] | None = None,
                think: tuple[str, ...] = ()) -> Sampling:
    """Read ``body``'s sampling fields; ``BadRequest`` names the first bad one, or one
    the dialect cannot carry (``carries``: its fields out of ``CARRIABLE``).
    ``tool_parser``: the ``--tool-parser``, whose structural tag constrains the calls
    where the dialect carries a ``tool_choice``; ``think``: the reasoning parser's
    open and close tags."""
    forcing = checked_forcing(body)
    _refuse_uncarried(body, carries)
    tool_tag = (_tool_tag(body, forcing, tool_parser, think) if "tool_choice" in carries
                else None)
    stop = body.get("stop")
    if stop is None:
        stops: tuple[str, ...] = ()
    elif isinstance(stop, str) and stop:  # "" would end the reply before its first token
        stops = (stop,)
    elif isinstance(stop, list) and len(stop) <= _MAX_STOPS and all(
            isinstance(s, str) and s for s in stop):
        stops = tuple(stop)
    else:
        raise BadRequest(
            f"stop must be a non-empty string or up to {_MAX_STOPS} of them", param="stop"
        )
    extra = body.get("stop_token_ids") or []
    if not isinstance(extra, list) or not all(type(i) is int and i >= 0 for i in extra):
        raise BadRequest("stop_token_ids must be a list of token ids", param="stop_token_ids")
    limit = _int(body, "max_completion_tokens", 1)
    if limit is None:
        limit = _int(body, "max_tokens", 1)
    logprobs = body.get("logprobs")
    if logprobs is not None and not isinstance(logprobs, bool):
        raise BadRequest("logprobs must be a boolean", param="logprobs")
    ignore_eos = body.get("ignore_eos")
    if ignore_eos is not None and not isinstance(ignore_eos, bool):
        raise BadRequest("ignore_eos must be a boolean", param="ignore_eos")
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
        stop_token_ids=tuple(dict.fromkeys([*(() if ignore_eos else stop_token_ids), *extra])),
        logprobs=bool(logprobs),
        top_logprobs=top,
        frequency_penalty=_penalty(body, "frequency_penalty", -2.0, 2.0),
        presence_penalty=_penalty(body, "presence_penalty", -2.0, 2.0),
        repetition_penalty=_penalty(body, "repetition_penalty", 0.0, 2.0, open_low=True),
        logit_bias=_logit_bias(body, vocab_size),
        stop_regex=_stop_regex(body),
        constraint=constraint_of(body, forcing, tool_tag),
        forcing=forcing,
        ignore_eos=bool(ignore_eos),
        require_reasoning=reasoning,
    )
