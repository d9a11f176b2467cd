"""A chat request's sampling fields, checked, for building token-prompt requests.

Invariants:
- Every field is checked for type and range here, before a slot is taken: a bad value
  is a 400 naming the field that uses no index (``seedproxy.sampling_fields``: the
  rules the engine applies too).
- A field the dialect cannot carry (outside its ``carries``) with a value other than a
  neutral one is a 400 naming it, never dropped; so is a forcing ``tool_choice`` where
  the dialect cannot carry one (its grammar is SGLang's, on ``/generate`` only).
- ``tools`` and ``tool_choice`` are checked as SGLang's chat route checks them
  (``seedproxy.tool_choice``), on every upstream.

Structured output (``constraint_of``):
- At most one constraint: ``regex``, ``ebnf``, ``json_schema`` or a ``response_format``
  other than ``text``; two are a 400 naming the second (SGLang: "Only one of regex,
  json_schema, or ebnf can be set").
- ``response_format`` (read by ``sampling_fields.format_of``) is also kept as asked, so
  each dialect maps it as its own chat route does.
- A forcing ``tool_choice`` (``required`` or a named tool) is the tool parser's
  structural tag where it builds one (``tools.structural``), else the JSON schema of
  ``seedproxy.tool_choice``; with any other constraint it is a 400, as SGLang 0.5.23's
  ``to_sampling_params`` refuses the pair. The tag of an unforced call (``auto`` with
  a strict tool) gives way to any other constraint, as SGLang drops it then.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..errors import BadRequest
from ..sampling_fields import (
    check_regex,
    format_of,
    logit_bias,
    number,
    penalties,
    regexes,
    token_ids,
)
from ..tool_choice import Forcing, ToolChoiceError, forcing_of
from .tools.base import ToolParser
from .tools.structural import ToolAsk

__all__ = ["CARRIABLE", "Constraint", "Sampling", "constraint_of", "sampling_of"]

_MAX_STOPS = 16

CARRIABLE = frozenset({
    "frequency_penalty", "presence_penalty", "repetition_penalty", "logit_bias", "regex",
    "ebnf", "json_schema", "stop_regex", "response_format", "tool_choice",
})
"""The optional fields a dialect may carry; each dialect says which in ``carries``."""

_NEUTRAL: dict[str, tuple[Any, ...]] = {
    "frequency_penalty": (0, 0.0), "presence_penalty": (0, 0.0), "repetition_penalty": (1, 1.0),
    "logit_bias": ({},), "stop_regex": ([],), "response_format": ({"type": "text"},),
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


def _stop_regex(body: dict[str, Any]) -> tuple[str, ...]:
    patterns = regexes(body.get("stop_regex"), "stop_regex")
    if len(patterns) > _MAX_STOPS or not all(patterns):
        raise BadRequest(f"stop_regex must be a regex or up to {_MAX_STOPS} regexes",
                         param="stop_regex")
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
    stops = [stop] if isinstance(stop, str) else [] if stop is None else stop
    if not isinstance(stops, list) or len(stops) > _MAX_STOPS or not all(
            isinstance(s, str) and s for s in stops):  # "" would end the reply at once
        raise BadRequest(f"stop must be a non-empty string or up to {_MAX_STOPS} of them",
                         param="stop")
    extra = token_ids(body.get("stop_token_ids"), "stop_token_ids")
    frequency, presence, repetition = penalties(body)
    limit = _int(body, "max_completion_tokens", 1) or _int(body, "max_tokens", 1)
    for key in ("logprobs", "ignore_eos"):
        if body.get(key) is not None and not isinstance(body[key], bool):
            raise BadRequest(f"{key} must be a boolean", param=key)
    ignore_eos = bool(body.get("ignore_eos"))
    top = _int(body, "top_logprobs", 0) or 0
    if top > 20:
        raise BadRequest("top_logprobs must be at most 20", param="top_logprobs")
    return Sampling(
        max_new_tokens=limit,
        temperature=number(body, "temperature"),
        top_p=number(body, "top_p"),
        top_k=_int(body, "top_k", -1),
        min_p=number(body, "min_p"),
        stop=tuple(stops),
        stop_token_ids=tuple(dict.fromkeys([*(() if ignore_eos else stop_token_ids), *extra])),
        logprobs=bool(body.get("logprobs")),
        top_logprobs=top,
        frequency_penalty=frequency,
        presence_penalty=presence,
        repetition_penalty=repetition,
        logit_bias=logit_bias(body.get("logit_bias"), vocab_size),
        stop_regex=_stop_regex(body),
        constraint=constraint_of(body, forcing, tool_tag),
        forcing=forcing,
        ignore_eos=ignore_eos,
        require_reasoning=reasoning,
    )


_GRAMMARS = ("regex", "ebnf", "json_schema")


@dataclass(frozen=True, slots=True)
class Constraint:
    field: str  # the request field that asked
    source: str  # the grammar, or the JSON schema as SGLang's chat route writes it
    response_format: dict[str, Any] | None = None
    """For ``response_format``: ``{"type": "json_object"}``, ``{"type": "json_schema",
    "json_schema": {...as sent}}`` or the ``structural_tag`` object as sent."""
    structural: bool = False  # a tool parser's structural tag for its calls

    @property
    def param(self) -> str:
        """The ``sampling_params`` key SGLang's chat route puts it under."""
        if self.field in _GRAMMARS:
            return self.field
        if self.structural or (self.response_format or {}).get("type") == "structural_tag":
            return "structural_tag"
        return "json_schema"  # json_object, json_schema, a forced tool call


def _schema_text(value: Any, field: str) -> str:
    """A schema given inline (an object) or as JSON text; the text SGLang would send."""
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except (RecursionError, ValueError):  # past json's recursion or int-digit limits
            raise BadRequest(f"{field} is not valid JSON", param=field) from None
        if not isinstance(parsed, dict | bool):
            raise BadRequest(f"{field} must be a JSON schema", param=field)
        return value
    if isinstance(value, dict):
        return json.dumps(value)
    raise BadRequest(f"{field} must be a JSON schema (an object or a string)", param=field)


def _grammar(body: dict[str, Any]) -> Constraint | None:
    given = [k for k in _GRAMMARS if body.get(k) is not None]
    if len(given) > 1:
        raise BadRequest("Only one of regex, json_schema, or ebnf can be set.", param=given[1])
    if not given:
        return None
    key = given[0]
    value = body[key]
    if key == "json_schema":
        return Constraint(key, _schema_text(value, key))
    if not isinstance(value, str) or not value:
        raise BadRequest(f"{key} must be a non-empty string", param=key)
    if key == "regex":
        check_regex(value, key)
    return Constraint(key, value)


def constraint_of(body: dict[str, Any], forcing: Forcing | None = None,
                  tool_tag: str | None = None) -> Constraint | None:
    """The one constraint ``body`` asks for (``forcing``: its forced tool call, checked;
    ``tool_tag``: the tool parser's structural tag for its calls, if it builds one);
    ``BadRequest`` names a bad or second one."""
    grammar = _grammar(body)
    given = format_of(body.get("response_format"), "in token-in-token-out mode")
    fmt = None if given is None else Constraint("response_format", given.source, given.asked)
    if grammar is not None and fmt is not None:
        raise BadRequest("response_format cannot be combined with regex, ebnf or json_schema",
                         param="response_format")
    asked = grammar or fmt
    if forcing is not None and asked is not None:
        raise BadRequest("tool_choice 'required' or a named tool cannot be combined with "
                         "response_format, regex, or ebnf: the tool-call constraint and the "
                         "output constraint cannot both be honored.", param="tool_choice")
    if asked is not None:
        return asked
    if tool_tag is not None:
        return Constraint("tool_choice", tool_tag, structural=True)
    return None if forcing is None else Constraint("tool_choice", forcing.schema)
