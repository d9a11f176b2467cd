"""``/v1/completions``: raw prompts (text or token ids), SGLang-shaped answers.

Invariants (SGLang's ``serving_completions.py``):
- ``return_token_ids`` gives ``choices[].token_ids`` and ``choices[].prompt_token_ids`` in
  both modes; when streaming, ``token_ids`` are the new ids of each chunk and
  ``prompt_token_ids`` rides on each choice's first chunk only.
- ``logprobs: k`` returns token logprobs plus the top ``k`` as ``{token: logprob}``;
  ``text_offset`` entries are -1, as SGLang reports them.
- Choices are ordered prompt-major: prompt i, choice j has index ``i * n + j``.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import orjson

from .errors import RequestError
from .generator import GenRequest, Update
from .openai_common import openai_sampling_params, token_text, usage, want_bool, want_int
from .state import EngineState, new_id

__all__ = ["CompletionJob", "completion_response", "completion_stream", "parse_completion"]


@dataclass(frozen=True)
class CompletionJob:
    reqs: list[GenRequest]
    model: str
    logprobs: int | None
    return_token_ids: bool
    include_usage: bool
    echo: bool
    n: int


def _prompts(state: EngineState, prompt: Any) -> list[list[int]]:
    if isinstance(prompt, str):
        return [state.encode(prompt, "prompt")]
    if isinstance(prompt, list) and prompt:
        if all(isinstance(p, str) for p in prompt):
            return [state.encode(p, "prompt") for p in prompt]
        if all(isinstance(p, list) for p in prompt):
            return [state.check_prompt(p) for p in prompt]
        return [state.check_prompt(prompt)]
    raise RequestError("prompt must be a string, a list of strings or token ids",
                       param="prompt")


def parse_completion(state: EngineState, body: dict[str, Any]) -> CompletionJob:
    prompts = _prompts(state, body.get("prompt"))
    params = openai_sampling_params(body, state.model.vocab_size, 16)
    logprobs = want_int(body, "logprobs", None)
    if logprobs is not None and not 0 <= logprobs <= 20:
        raise RequestError("logprobs must be between 0 and 20", param="logprobs")
    opts = body.get("stream_options") or {}
    rid = new_id()
    reqs = []
    for p_i, prompt in enumerate(prompts):
        for c in range(params.n):
            k = p_i * params.n + c
            reqs.append(GenRequest(rid if len(prompts) * params.n == 1 else f"{rid}-{k}",
                                   prompt, params, logprobs is not None, logprobs or 0))
    model = body.get("model")
    return CompletionJob(
        reqs=reqs, model=model if isinstance(model, str) else state.model.name,
        logprobs=logprobs, return_token_ids=want_bool(body, "return_token_ids"),
        include_usage=isinstance(opts, dict) and bool(opts.get("include_usage")),
        echo=want_bool(body, "echo"), n=params.n,
    )


def _logprobs(state: EngineState, upd: Update, start: int, stop: int) -> dict[str, Any]:
    tok = state.model.tokenizer
    tokens = [token_text(tok, t) for t in upd.output_ids[start:stop]]
    tops = [{token_text(tok, tid): lp for tid, lp in top}
            for top in upd.top_logprobs[start:stop]]
    return {"text_offset": [-1] * len(tokens), "token_logprobs": upd.logprobs[start:stop],
            "tokens": tokens, "top_logprobs": tops}


def _echo(state: EngineState, job: CompletionJob, req: GenRequest) -> str:
    return str(state.model.tokenizer.decode(req.prompt_ids)) if job.echo else ""


def _prompt_usage(job: CompletionJob, finals: list[Update]) -> dict[str, Any]:
    prompt = sum(finals[i].prompt_tokens for i in range(0, len(finals), job.n))
    return usage(prompt, finals)


async def completion_response(state: EngineState, job: CompletionJob) -> dict[str, Any]:
    finals = [await state.worker.complete(r) for r in job.reqs]
    choices = []
    for idx, (req, upd) in enumerate(zip(job.reqs, finals, strict=True)):
        fin = upd.finish or {}
        choice: dict[str, Any] = {
            "index": idx, "text": _echo(state, job, req) + upd.text,
            "logprobs": _logprobs(state, upd, 0, len(upd.output_ids))
            if job.logprobs is not None else None,
            "finish_reason": fin.get("type"), "matched_stop": fin.get("matched"),
        }
        if job.return_token_ids:
            choice["token_ids"] = list(upd.output_ids)
            choice["prompt_token_ids"] = list(req.prompt_ids)
        choices.append(choice)
    return {"id": job.reqs[0].rid, "object": "text_completion", "created": int(time.time()),
            "model": job.model, "choices": choices, "usage": _prompt_usage(job, finals),
            "metadata": {"weight_version": "default"}}


def _chunk(job: CompletionJob, choices: list[dict[str, Any]], **extra: Any) -> bytes:
    body = {"id": job.reqs[0].rid, "object": "text_completion", "created": int(time.time()),
            "model": job.model, "choices": choices, **extra}
    return b"data: " + orjson.dumps(body) + b"\n\n"


async def completion_stream(state: EngineState, job: CompletionJob) -> AsyncIterator[bytes]:
    finals: list[Update] = []
    for idx, req in enumerate(job.reqs):
        sent_text, sent_tok, first = 0, 0, True
        async for upd in state.worker.stream(req):
            fin = upd.finish or {}
            delta = upd.text[sent_text:]
            if first:
                delta = _echo(state, job, req) + delta
            n_tok = len(upd.output_ids)
            if not (delta or n_tok > sent_tok or upd.finish is not None):
                continue
            choice: dict[str, Any] = {
                "index": idx, "text": delta,
                "logprobs": _logprobs(state, upd, sent_tok, n_tok)
                if job.logprobs is not None else None,
                "finish_reason": fin.get("type"), "matched_stop": fin.get("matched"),
            }
            if job.return_token_ids:
                choice["token_ids"] = upd.output_ids[sent_tok:n_tok]
                if first:
                    choice["prompt_token_ids"] = list(req.prompt_ids)
            yield _chunk(job, [choice])
            sent_text, sent_tok, first = len(upd.text), n_tok, False
            if upd.finish is not None:
                finals.append(upd)
    if job.include_usage:
        yield _chunk(job, [], usage=_prompt_usage(job, finals))
    yield b"data: [DONE]\n\n"
