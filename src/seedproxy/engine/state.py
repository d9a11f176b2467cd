"""What the routes share: the model, its worker, prompt validation, requests fanned out
per choice, a record of how generations ended, and the OpenAI routes' jobs and params.

Invariants:
- Every prompt reaching the worker is non-empty, in-vocabulary and strictly shorter than
  the context, so generation itself cannot fail on bad input; a prompt plus the
  ``max_tokens`` asked reaching the context is a 400, not clamped.
- ``JobLog`` keeps the last ``maxlen`` final updates by rid (appended from the worker
  thread): operators and tests can see that an abandoned job was aborted.
- OpenAI fields map onto SGLang sampling params as SGLang maps them (``seed`` ->
  ``sampling_seed``, ``max_tokens``/``max_completion_tokens`` -> ``max_new_tokens``, ...),
  then go through ``/generate``'s validation; ``response_format`` maps as in SGLang's
  ``serving_chat`` (``seedproxy.sampling_fields.format_of``). ``n > 1`` copies one set of
  params, seed included, to every choice (as SGLang).
"""

from __future__ import annotations

import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from ..sampling_fields import format_of
from ..sse_frames import data_frame
from ..template_input import content_format, reserved_names
from .errors import InternalError, RequestError
from .generator import GenRequest, Update
from .grammar import CompiledGrammar, GrammarCompiler, processor
from .model import EngineModel
from .params import SamplingParams, parse_sampling_params, want_int
from .worker import Worker

__all__ = ["EngineState", "Finished", "JobLog", "OpenAIJob", "openai_sampling_params",
           "request_id", "usage"]


@dataclass(frozen=True)
class Finished:
    rid: str
    finish_type: str
    completion_tokens: int


class JobLog:
    """The most recent final updates (thread-safe: ``deque.append`` is atomic)."""

    def __init__(self, maxlen: int = 256) -> None:
        self._done: deque[Finished] = deque(maxlen=maxlen)

    def record(self, rid: str, upd: Update) -> None:
        fin = upd.finish or {}
        self._done.append(Finished(rid, str(fin.get("type")), upd.completion_tokens))

    def find(self, rid: str) -> Finished | None:
        """The latest record for ``rid``, or None."""
        return next((f for f in reversed(self._done) if f.rid == rid), None)


def request_id(body: dict[str, Any]) -> str:
    """The body's ``rid`` (as SGLang takes it, to name the request for
    ``/abort_request``), else a new id."""
    rid = body.get("rid")
    return rid if isinstance(rid, str) and rid else uuid.uuid4().hex


@dataclass
class EngineState:
    model: EngineModel
    worker: Worker
    grammars: GrammarCompiler = field(init=False)
    jobs: JobLog = field(default_factory=JobLog)
    # The chat template's content format and the names its kwargs may not take.
    content_format: str = field(init=False)
    template_reserved: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        tok = self.model.tokenizer
        self.grammars = GrammarCompiler(tok, self.model.vocab_size, self.model.eos_token_ids)
        template = getattr(tok, "chat_template", None)
        self.content_format = content_format(template if isinstance(template, str) else "")
        self.template_reserved = reserved_names(tok)

    def check_prompt(self, ids: Any) -> list[int]:
        """Validate token ids; raise ``RequestError`` naming lengths when too long."""
        if not isinstance(ids, list) or not all(
            isinstance(t, int) and not isinstance(t, bool) for t in ids
        ):
            raise RequestError("input_ids must be a list of integers", param="input_ids")
        if not ids:
            raise RequestError("The input is empty: at least one token is required.")
        ctx = self.model.context_length
        if len(ids) >= ctx:
            raise RequestError(
                f"The input ({len(ids)} tokens) is longer than the model's context length "
                f"({ctx} tokens)."
            )
        vocab = self.model.vocab_size
        bad = next((t for t in ids if not 0 <= t < vocab), None)
        if bad is not None:
            raise RequestError(f"Token id {bad} is out of the vocabulary [0, {vocab}).")
        return ids

    def encode(self, text: Any, param: str = "text") -> list[int]:
        if not isinstance(text, str):
            raise RequestError(f"{param} must be a string", param=param)
        return self.check_prompt(list(self.model.tokenizer.encode(text,
                                                                  add_special_tokens=False)))

    def token_text(self, token_id: int) -> str:
        """The text of one token, as SGLang reports it in logprobs."""
        return str(self.model.tokenizer.decode([token_id]))

    def grammar(self, prompts: list[list[int]], params: SamplingParams,
                asked: int | None) -> CompiledGrammar | None:
        """SGLang's budget check (``prompt + asked >= context`` is a 400 naming both), then
        the compiled grammar of ``params`` (None without one)."""
        ctx = self.model.context_length
        for prompt in prompts:
            if asked is not None and len(prompt) + asked >= ctx:
                raise RequestError(
                    f"Requested token count exceeds the model's maximum context length of "
                    f"{ctx} tokens. You requested a total of {len(prompt) + asked} tokens: "
                    f"{len(prompt)} tokens from the input messages and {asked} tokens for "
                    "the completion. Please reduce the number of tokens in the input "
                    "messages or the completion to fit within the limit.",
                    param="max_tokens")
        return None if params.grammar is None else self.grammars.compile(*params.grammar)

    def fan_out(self, rid: str, prompts: list[list[int]], params: SamplingParams,
                grammar: CompiledGrammar | None, **options: Any) -> list[GenRequest]:
        """One ``GenRequest`` per (prompt, choice), prompt-major, each with its own
        processor; ``rid`` is the request's own when it makes one, else ``rid-k``
        (``k = i * n + j``)."""
        def own(k: int) -> GenRequest:
            matcher = None if grammar is None else self.grammars.processor(grammar)
            return GenRequest(rid if total == 1 else f"{rid}-{k}", prompts[k // params.n],
                              params, processor=processor(params, matcher), **options)

        total = len(prompts) * params.n
        return [own(k) for k in range(total)]

    async def run_all(self, reqs: list[GenRequest]) -> list[Update]:
        """Run ``reqs`` to their ends, in order; ``InternalError`` if one failed inside the
        engine (an abort carrying ``status_code``, as SGLang's; a plain abort, a cancelled
        job, carries none and is no error)."""
        done = [await self.worker.complete(r, self.jobs.record) for r in reqs]
        for upd in done:
            fin = upd.finish or {}
            if fin.get("type") == "abort" and isinstance(fin.get("status_code"), int):
                raise InternalError(str(fin.get("message")), fin["status_code"])
        return done


@dataclass(frozen=True)
class OpenAIJob:
    """An OpenAI route's request: one ``GenRequest`` per choice, prompt-major."""

    reqs: list[GenRequest]
    model: str
    include_usage: bool
    continuous_usage: bool

    @staticmethod
    def fields(state: EngineState, body: dict[str, Any]) -> dict[str, Any]:
        """The fields but ``reqs``: the model shown and ``stream_options``."""
        model = body.get("model")
        opts = body.get("stream_options")
        opts = opts if isinstance(opts, dict) else {}
        return {"model": model if isinstance(model, str) else state.model.name,
                "include_usage": bool(opts.get("include_usage")),
                "continuous_usage": bool(opts.get("continuous_usage_stats"))}

    def chunk(self, kind: str, choices: list[dict[str, Any]], **extra: Any) -> bytes:
        return data_frame({"id": self.reqs[0].rid, "object": kind, "created": int(time.time()),
                           "model": self.model, "choices": choices, **extra})


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
    seed = want_int(body, "seed", None)
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


def usage(prompt_tokens: int, completion: int | list[Update]) -> dict[str, Any]:
    """OpenAI usage; given the final updates, the prompt counts once however many choices
    share it."""
    if isinstance(completion, list):
        completion = sum(u.completion_tokens for u in completion)
    return {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + completion,
            "completion_tokens": completion, "prompt_tokens_details": None,
            "reasoning_tokens": 0}
