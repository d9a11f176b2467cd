"""SGLang sampling parameters: parsing and validation.

Invariants:
- The accepted keys are exactly SGLang's ``SamplingParams`` API fields; any other key is a
  ``RequestError`` (400), as SGLang's ``SamplingParams(**d)`` rejects it.
- ``sampling_seed`` must be an int (a bool or string is a 400); ``None`` means 42.
- ``temperature < 1e-5`` is greedy: the seed then changes nothing.
- One grammar at most (``structural_tag`` only when none of ``regex``, ``json_schema``,
  ``ebnf`` is set, as SGLang picks); penalties, ``logit_bias``, ``stop_regex`` and
  ``stop_token_ids`` are checked by ``seedproxy.sampling_fields``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from ..errors import BadRequest
from ..sampling_fields import logit_bias, number, penalties, regexes, token_ids
from .errors import RequestError

__all__ = ["GREEDY_EPS", "SAMPLING_KEYS", "SamplingParams", "parse_sampling_params",
           "want_bool", "want_int"]

GREEDY_EPS = 1e-5

SAMPLING_KEYS = frozenset({
    "max_new_tokens", "stop", "stop_token_ids", "stop_regex", "temperature", "top_p",
    "top_k", "min_p", "frequency_penalty", "presence_penalty", "repetition_penalty",
    "min_new_tokens", "n", "json_schema", "regex", "ebnf", "structural_tag", "ignore_eos",
    "skip_special_tokens", "spaces_between_special_tokens", "no_stop_trim", "custom_params",
    "stream_interval", "logit_bias", "sampling_seed",
})


@dataclass(frozen=True)
class SamplingParams:
    """Validated, normalised parameters of one generation (one choice)."""

    max_new_tokens: int | None = 128
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    stop: tuple[str, ...] = ()
    stop_token_ids: frozenset[int] = frozenset()
    ignore_eos: bool = False
    min_new_tokens: int = 0
    skip_special_tokens: bool = True
    no_stop_trim: bool = False
    seed: int = 42
    n: int = 1
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logit_bias: tuple[tuple[int, float], ...] = ()
    grammar: tuple[str, str] | None = None
    """``(field, source)``: ``field`` is ``regex``, ``json_schema``, ``ebnf`` or
    ``structural_tag``."""
    stop_regex: tuple[str, ...] = ()


def want_int(body: dict[str, Any], key: str, default: int | None, *,
             floats: bool = False) -> int | None:
    """``body[key]`` (``default`` when absent or null), an int (or, with ``floats``, a
    float with an integral value), else a 400."""
    v = body.get(key)
    if v is None:
        return default
    if floats and isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, bool) or not isinstance(v, int):
        raise RequestError(f"{key} must be an integer, got {v!r}", param=key)
    return v


def want_bool(body: dict[str, Any], key: str, default: bool = False) -> bool:
    v = body.get(key)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise RequestError(f"{key} must be a boolean, got {v!r}", param=key)
    return v


def _int(d: dict[str, Any], key: str, default: int) -> int:
    value = want_int(d, key, default, floats=True)
    assert value is not None
    return value


def _stops(v: Any) -> tuple[str, ...]:
    if v is None:
        return ()
    if isinstance(v, str):
        return (v,) if v else ()
    if isinstance(v, list) and all(isinstance(s, str) for s in v):
        return tuple(s for s in v if s)
    raise RequestError(f"stop must be a string or a list of strings, got {v!r}", param="stop")


def _grammar(raw: dict[str, Any]) -> tuple[str, str] | None:
    given = [k for k in ("json_schema", "regex", "ebnf") if raw.get(k) is not None]
    if len(given) > 1:
        raise RequestError("Only one of regex, json_schema, or ebnf can be set.",
                           param=given[1])
    if not given and raw.get("structural_tag") is not None:
        given = ["structural_tag"]  # SGLang's last choice, after the other three
    if not given:
        return None
    key, src = given[0], raw[given[0]]
    if key == "json_schema" and isinstance(src, dict):
        src = json.dumps(src)
    if not isinstance(src, str):
        raise RequestError(f"{key} must be a string", param=key)
    return key, src


def _num(d: dict[str, Any], key: str, default: float) -> float:
    value = number(d, key)
    return default if value is None else value


def parse_sampling_params(raw: Any, vocab_size: int) -> SamplingParams:
    """Validate a ``sampling_params`` object the way SGLang does; raise ``RequestError``."""
    try:
        return _parsed(raw, vocab_size)
    except BadRequest as exc:
        raise RequestError(exc.message, param=exc.param) from None


def _parsed(raw: Any, vocab_size: int) -> SamplingParams:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise RequestError("sampling_params must be an object", param="sampling_params")
    unknown = sorted(set(raw) - SAMPLING_KEYS)
    if unknown:
        raise RequestError(
            f"SamplingParams.__init__() got an unexpected keyword argument '{unknown[0]}'",
            param=unknown[0])
    seed = raw.get("sampling_seed", 42)
    if seed is None:
        seed = 42
    elif isinstance(seed, bool) or not isinstance(seed, int):
        raise RequestError(f"sampling_seed must be an integer, got {seed!r}",
                           param="sampling_seed")
    elif not -(2**63) <= seed < 2**63:
        raise RequestError("sampling_seed must fit in 64 bits", param="sampling_seed")
    temperature, top_p = _num(raw, "temperature", 1.0), _num(raw, "top_p", 1.0)
    top_k, min_p = _int(raw, "top_k", -1), _num(raw, "min_p", 0.0)
    # SGLang: absent is 128; an explicit null is "up to the context" (its chat routes).
    max_new = None if raw.get("max_new_tokens", 0) is None else _int(raw, "max_new_tokens", 128)
    min_new, n = _int(raw, "min_new_tokens", 0), _int(raw, "n", 1)
    if not math.isfinite(temperature) or temperature < 0:
        raise RequestError(
            f"temperature must be a non-negative finite number, got {temperature}.")
    if not 0.0 < top_p <= 1.0:
        raise RequestError(f"top_p must be in (0, 1], got {top_p}.")
    if not 0.0 <= min_p <= 1.0:
        raise RequestError(f"min_p must be in [0, 1], got {min_p}.")
    if top_k < 1 and top_k != -1:
        raise RequestError(f"top_k must be -1 (disable) or at least 1, got {top_k}.")
    frequency, presence, rep = penalties(raw)
    if max_new is not None and max_new < 0:
        raise RequestError(f"max_new_tokens must be at least 0, got {max_new}.")
    if min_new < 0 or (max_new is not None and min_new > max_new):
        raise RequestError(f"min_new_tokens must be in [0, max_new_tokens], got {min_new}.")
    if n < 1:
        raise RequestError(f"n must be at least 1, got {n}.")
    return SamplingParams(
        max_new_tokens=max_new, temperature=temperature, top_p=top_p, top_k=top_k,
        min_p=min_p, stop=_stops(raw.get("stop")),
        stop_token_ids=frozenset(token_ids(raw.get("stop_token_ids"), "stop_token_ids")),
        ignore_eos=want_bool(raw, "ignore_eos"), min_new_tokens=min_new,
        skip_special_tokens=want_bool(raw, "skip_special_tokens", True),
        no_stop_trim=want_bool(raw, "no_stop_trim"), seed=seed, n=n,
        frequency_penalty=0.0 if frequency is None else frequency,
        presence_penalty=0.0 if presence is None else presence,
        repetition_penalty=1.0 if rep is None else rep,
        logit_bias=logit_bias(raw.get("logit_bias"), vocab_size), grammar=_grammar(raw),
        stop_regex=tuple(p for p in regexes(raw.get("stop_regex"), "stop_regex") if p),
    )
