"""Shared pieces of the OpenAI-compatible routes: parameters, logprobs, usage, errors.

Invariants:
- OpenAI fields map onto SGLang sampling params exactly as SGLang maps them (``seed`` ->
  ``sampling_seed``, ``max_tokens``/``max_completion_tokens`` -> ``max_new_tokens``, ...),
  then go through the same validation as ``/generate``.
- ``n > 1`` copies one set of params, seed included, to every choice (SGLang's behaviour:
  all choices of one request are identical).
- ``response_format`` maps as in SGLang's ``serving_chat`` (``seedproxy.response_format``,
  the rule token-in-token-out mode uses).
- A prompt plus ``max_tokens`` that reaches the context length is a 400 (SGLang's
  message), not clamped.
"""

from __future__ import annotations

from typing import Any

from ..response_format import format_of
from .errors import InternalError, RequestError
from .generator import Update
from .params import SamplingParams, parse_sampling_params, want_bool

__all__ = [
    "check_context_budget", "error_body", "openai_sampling_params", "raise_for_failure",
    "token_text", "usage", "usage_counts", "want_bool", "want_int",
]


def error_body(message: str, status: int = 400, err_type: str = "BadRequestError",
               param: str | None = None) -> dict[str, Any]:
    """SGLang's ``ErrorResponse``: ``{object, message, type, param, code}``."""
    return {"object": "error", "message": message, "type": err_type, "param": param,
            "code": status}


def want_int(body: dict[str, Any], key: str, default: int | None) -> int | None:
    v = body.get(key, default)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int):
        raise RequestError(f"{key} must be an integer, got {v!r}", param=key)
    return v


def check_context_budget(prompt_len: int, max_new_tokens: int | None,
                         context_len: int) -> None:
    """SGLang's check: ``prompt + max_new_tokens >= context`` is a 400 naming both."""
    if max_new_tokens is None or prompt_len + max_new_tokens < context_len:
        return
    raise RequestError(
        f"Requested token count exceeds the model's maximum context length of {context_len} "
        f"tokens. You requested a total of {prompt_len + max_new_tokens} tokens: {prompt_len} "
        f"tokens from the input messages and {max_new_tokens} tokens for the completion. "
        "Please reduce the number of tokens in the input messages or the completion to fit "
        "within the limit.", param="max_tokens")


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
        "regex": body.get("regex"),
        "ebnf": body.get("ebnf"),
        "json_schema": body.get("json_schema"),
        "stop_regex": body.get("stop_regex"),
        "sampling_seed": seed,
        "n": n,
    }
    asked = format_of(body.get("response_format"), "by the embedded engine")
    if asked is not None:
        if any(sp[k] is not None for k in ("regex", "ebnf", "json_schema")):
            raise RequestError("response_format cannot be combined with regex, ebnf or "
                               "json_schema", param="response_format")
        sp[asked.field] = asked.source
    return parse_sampling_params({k: v for k, v in sp.items() if v is not None}, vocab_size)


def token_text(tokenizer: Any, token_id: int) -> str:
    """The text of one token, as SGLang reports it in logprobs."""
    return str(tokenizer.decode([token_id]))


def usage(prompt_tokens: int, finals: list[Update]) -> dict[str, Any]:
    """OpenAI usage; the prompt counts once however many choices share it."""
    return usage_counts(prompt_tokens, sum(u.completion_tokens for u in finals))


def usage_counts(prompt_tokens: int, completion: int) -> dict[str, Any]:
    return {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + completion,
            "completion_tokens": completion, "prompt_tokens_details": None,
            "reasoning_tokens": 0}


def raise_for_failure(finals: list[Update]) -> None:
    """Raise ``InternalError`` if a generation failed inside the engine.

    The worker reports a failure as SGLang does, an abort carrying ``status_code``; a plain
    abort (a cancelled job) carries none and is not an error.
    """
    for upd in finals:
        fin = upd.finish or {}
        if fin.get("type") == "abort" and isinstance(fin.get("status_code"), int):
            raise InternalError(str(fin.get("message")), fin["status_code"])
