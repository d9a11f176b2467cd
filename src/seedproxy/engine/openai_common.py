"""What the OpenAI-compatible routes share: jobs, parameters, usage, errors.

Invariants:
- OpenAI fields map onto SGLang sampling params as SGLang maps them (``seed`` ->
  ``sampling_seed``, ``max_tokens``/``max_completion_tokens`` -> ``max_new_tokens``, ...),
  then go through ``/generate``'s validation; ``response_format`` maps as in SGLang's
  ``serving_chat`` (``seedproxy.sampling_fields.format_of``).
- ``n > 1`` copies one set of params, seed included, to every choice (as SGLang: all
  choices of one request are identical).
- A prompt plus ``max_tokens`` that reaches the context length is a 400, not clamped.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..sampling_fields import format_of
from ..sse_frames import data_frame
from .errors import InternalError, RequestError
from .generator import GenRequest, Update
from .params import SamplingParams, parse_sampling_params, want_bool
from .state import EngineState, JobLog
from .worker import Worker

__all__ = [
    "OpenAIJob", "check_context_budget", "fan_out", "job_fields",
    "openai_sampling_params", "run_all", "token_text", "usage", "usage_counts",
    "want_bool", "want_int",
]


@dataclass(frozen=True)
class OpenAIJob:
    """An OpenAI route's request: one ``GenRequest`` per choice, prompt-major."""

    reqs: list[GenRequest]
    model: str
    include_usage: bool
    continuous_usage: bool

    def chunk(self, kind: str, choices: list[dict[str, Any]], **extra: Any) -> bytes:
        return data_frame({"id": self.reqs[0].rid, "object": kind, "created": int(time.time()),
                           "model": self.model, "choices": choices, **extra})


def job_fields(state: EngineState, body: dict[str, Any]) -> dict[str, Any]:
    """``OpenAIJob``'s fields but ``reqs``: the model shown and ``stream_options``."""
    model = body.get("model")
    opts = body.get("stream_options") or {}
    return {"model": model if isinstance(model, str) else state.model.name,
            "include_usage": isinstance(opts, dict) and bool(opts.get("include_usage")),
            "continuous_usage": isinstance(opts, dict)
            and bool(opts.get("continuous_usage_stats"))}


def fan_out(rid: str, prompts: list[list[int]], n: int,
            make: Callable[[str, list[int]], GenRequest]) -> list[GenRequest]:
    """``make(rid, prompt)`` per (prompt, choice), prompt-major; ``rid`` is the request's
    own when it makes one, else ``rid-k`` (``k = i * n + j``)."""
    total = len(prompts) * n
    return [make(rid if total == 1 else f"{rid}-{k}", prompts[k // n]) for k in range(total)]


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


_PASSED = ("temperature", "top_p", "top_k", "min_p", "stop", "stop_token_ids", "ignore_eos",
           "skip_special_tokens", "no_stop_trim", "frequency_penalty", "presence_penalty",
           "repetition_penalty", "logit_bias", "regex", "ebnf", "json_schema", "stop_regex")
"""OpenAI body fields passed to the sampling params under their own names."""


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
    sp: dict[str, Any] = {"max_new_tokens": max_tokens, **{k: body.get(k) for k in _PASSED},
                          "min_new_tokens": body.get("min_tokens"), "sampling_seed": seed,
                          "n": n}
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


async def complete(worker: Worker, log: JobLog, req: GenRequest) -> Update:
    """Run ``req`` to its end and return the final update; if the waiting task is
    cancelled (its client went away) the job's cancel flag is set, so the worker stops it
    at the next token."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[Update] = loop.create_future()
    cancel = threading.Event()

    def deliver(upd: Update) -> None:
        if not done.done():
            done.set_result(upd)

    def on_update(upd: Update) -> None:
        if upd.finish is None:
            return
        log.record(req.rid, upd)
        try:
            loop.call_soon_threadsafe(deliver, upd)
        except RuntimeError:  # the loop is gone: nobody is waiting any more
            pass

    worker.submit(req, on_update, cancel)
    try:
        return await done
    finally:
        cancel.set()


async def run_all(state: EngineState, reqs: list[GenRequest]) -> list[Update]:
    """Run ``reqs`` to their ends, in order; ``InternalError`` if one failed inside the
    engine (the worker's abort carrying ``status_code``, as SGLang's; a plain abort, a
    cancelled job, carries none and is no error)."""
    done = [await complete(state.worker, state.jobs, r) for r in reqs]
    for upd in done:
        fin = upd.finish or {}
        if fin.get("type") == "abort" and isinstance(fin.get("status_code"), int):
            raise InternalError(str(fin.get("message")), fin["status_code"])
    return done
