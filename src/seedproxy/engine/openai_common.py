"""Shared pieces of the OpenAI-compatible routes: parameters, logprobs, usage, errors.

Invariants:
- OpenAI fields map onto SGLang sampling params exactly as SGLang maps them (``seed`` ->
  ``sampling_seed``, ``max_tokens``/``max_completion_tokens`` -> ``max_new_tokens``, ...),
  then go through the same validation as ``/generate``.
- ``n > 1`` copies one set of params, seed included, to every choice (SGLang's behaviour:
  all choices of one request are identical).
"""

from __future__ import annotations

from typing import Any

from .errors import RequestError
from .generator import Update
from .params import SamplingParams, parse_sampling_params

__all__ = [
    "error_body", "openai_sampling_params", "token_text", "usage", "want_bool", "want_int",
]


def error_body(message: str, status: int = 400, err_type: str = "BadRequestError",
               param: str | None = None) -> dict[str, Any]:
    """SGLang's ``ErrorResponse``: ``{object, message, type, param, code}``."""
    return {"object": "error", "message": message, "type": err_type, "param": param,
            "code": status}


def want_bool(body: dict[str, Any], key: str, default: bool = False) -> bool:
    v = body.get(key, default)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise RequestError(f"{key} must be a boolean, got {v!r}", param=key)
    return v


def want_int(body: dict[str, Any], key: str, default: int | None) -> int | None:
    v = body.get(key, default)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int):
        raise RequestError(f"{key} must be an integer, got {v!r}", param=key)
    return v


def openai_sampling_params(body: dict[str, Any], vocab_size: int,
                           default_max_tokens: int | None) -> SamplingParams:
    """Map an OpenAI chat/completions body to validated ``SamplingParams``."""
    max_tokens = want_int(body, "max_completion_tokens", None)
    if max_tokens is None:
        max_tokens = want_int(body, "max_tokens", default_max_tokens)
    if max_tokens is not None and max_tokens <= 0:
        raise RequestError("max_tokens must be positive", param="max_tokens")
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise RequestError(f"seed must be an integer, got {seed!r}", param="seed")
    n = want_int(body, "n", 1)
    if n is None or n < 1 or n > 128:
        raise RequestError(f"n must be between 1 and 128, got {n}", param="n")
    sp: dict[str, Any] = {
        "max_new_tokens": max_tokens,
        "temperature": body.get("temperature"),
        "top_p": body.get("top_p"),
        "top_k": body.get("top_k"),
        "min_p": body.get("min_p"),
        "stop": body.get("stop"),
        "stop_token_ids": body.get("stop_token_ids"),
        "ignore_eos": body.get("ignore_eos"),
        "skip_special_tokens": body.get("skip_special_tokens"),
        "no_stop_trim": body.get("no_stop_trim"),
        "min_new_tokens": body.get("min_tokens"),
        "frequency_penalty": body.get("frequency_penalty"),
        "presence_penalty": body.get("presence_penalty"),
        "repetition_penalty": body.get("repetition_penalty"),
        "logit_bias": body.get("logit_bias"),
        "sampling_seed": seed,
        "n": n,
    }
    return parse_sampling_params({k: v for k, v in sp.items() if v is not None}, vocab_size)


def token_text(tokenizer: Any, token_id: int) -> str:
    """The text of one token, as SGLang reports it in logprobs."""
    return str(tokenizer.decode([token_id]))


def usage(prompt_tokens: int, finals: list[Update]) -> dict[str, Any]:
    """OpenAI usage; the prompt counts once however many choices share it."""
    completion = sum(u.completion_tokens for u in finals)
    return {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + completion,
            "completion_tokens": completion, "prompt_tokens_details": None,
            "reasoning_tokens": 0}
