"""``/v1/completions``: raw prompts (text or token ids), SGLang-shaped answers.

Invariants (SGLang's ``serving_completions.py``):
- ``return_token_ids`` gives ``choices[].token_ids`` and ``prompt_token_ids``; a stream
  gives each chunk's new ids, and ``prompt_token_ids`` on each choice's first chunk only.
- ``logprobs: k`` returns token logprobs plus the top ``k`` as ``{token: logprob}``;
  ``text_offset`` is each token's character offset in the choice's text (as OpenAI and
  vLLM; SGLang reports -1). With ``echo`` the prompt's tokens come first, the first with a
  ``None`` logprob.
- ``stream_options.continuous_usage_stats`` puts the usage so far in every chunk.
- Choices are prompt-major: prompt i, choice j has index ``i * n + j``.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from ..sse_frames import DONE
from .errors import RequestError
from .generator import GenRequest, Update
from .params import want_bool, want_int
from .state import EngineState, OpenAIJob, openai_sampling_params, request_id, usage

__all__ = ["CompletionJob", "completion_response", "completion_stream", "parse_completion"]


@dataclass(frozen=True)
class CompletionJob(OpenAIJob):
    logprobs: int | None
    return_token_ids: bool
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
    grammar = state.grammar(prompts, params, params.max_new_tokens)
    echo = want_bool(body, "echo")
    reqs = state.fan_out(request_id(body), prompts, params, grammar,
                         return_logprob=logprobs is not None, top_logprobs_num=logprobs or 0,
                         return_input_logprob=echo and logprobs is not None)
    return CompletionJob(
        reqs=reqs, **OpenAIJob.fields(state, body), logprobs=logprobs,
        return_token_ids=want_bool(body, "return_token_ids"), echo=echo, n=params.n,
    )


def _logprobs(state: EngineState, upd: Update, start: int, stop: int, offset: int,
              prompt: list[int] | None = None) -> dict[str, Any]:
    """OpenAI legacy logprobs for output tokens ``start:stop`` (after ``prompt``'s, when
    echoing), the first at character ``offset``."""
    tokens = [state.token_text(t) for t in list(prompt or []) + upd.output_ids[start:stop]]
    lps: list[float | None] = []
    tops: list[dict[str, float] | None] = []
    if prompt:
        lps += upd.input_logprobs[: len(prompt)]
        if upd.input_top_logprobs:
            tops += [({state.token_text(tid): lp for tid, lp in top} if i else None)
                     for i, top in enumerate(upd.input_top_logprobs[: len(prompt)])]
    lps += upd.logprobs[start:stop]
    tops += [{state.token_text(tid): lp for tid, lp in top}
             for top in upd.top_logprobs[start:stop]]
    offsets = list(itertools.accumulate((len(t) for t in tokens), initial=offset))[:-1]
    return {"text_offset": offsets, "token_logprobs": lps, "tokens": tokens,
            "top_logprobs": tops}


def _echo(state: EngineState, job: CompletionJob, req: GenRequest) -> str:
    return str(state.model.tokenizer.decode(req.prompt_ids)) if job.echo else ""


def _prompt_usage(job: CompletionJob, finals: list[Update]) -> dict[str, Any]:
    prompt = sum(finals[i].prompt_tokens for i in range(0, len(finals), job.n))
    return usage(prompt, finals)


def _choice(state: EngineState, job: CompletionJob, idx: int, req: GenRequest, upd: Update,
            text: str, start: int, offset: int, first: bool) -> dict[str, Any]:
    """Choice ``idx`` with output tokens ``start:`` (the prompt's too on its ``first``)."""
    fin, stop = upd.finish or {}, len(upd.output_ids)
    choice: dict[str, Any] = {
        "index": idx, "text": text,
        "logprobs": None if job.logprobs is None else _logprobs(
            state, upd, start, stop, offset, req.prompt_ids if job.echo and first else None),
        "finish_reason": fin.get("type"), "matched_stop": fin.get("matched"),
    }
    if job.return_token_ids:
        choice["token_ids"] = upd.output_ids[start:stop]
        if first:
            choice["prompt_token_ids"] = list(req.prompt_ids)
    return choice


async def completion_response(state: EngineState, job: CompletionJob) -> dict[str, Any]:
    finals = await state.run_all(job.reqs)
    choices = [_choice(state, job, idx, req, upd, _echo(state, job, req) + upd.text, 0, 0, True)
               for idx, (req, upd) in enumerate(zip(job.reqs, finals, strict=True))]
    return {"id": job.reqs[0].rid, "object": "text_completion", "created": int(time.time()),
            "model": job.model, "choices": choices, "usage": _prompt_usage(job, finals),
            "metadata": {"weight_version": finals[0].weight_version}}


async def completion_stream(state: EngineState, job: CompletionJob) -> AsyncIterator[bytes]:
    finals: list[Update] = []
    for idx, req in enumerate(job.reqs):
        sent_text, sent_tok, first, offset = 0, 0, True, 0
        async for upd in state.worker.stream(req):
            delta = (_echo(state, job, req) if first else "") + upd.text[sent_text:]
            n_tok = len(upd.output_ids)
            if not (delta or n_tok > sent_tok or upd.finish is not None):
                continue
            choice = _choice(state, job, idx, req, upd, delta, sent_tok, offset, first)
            if choice["logprobs"] is not None:
                offset += sum(len(t) for t in choice["logprobs"]["tokens"])
            extra = ({"usage": usage(upd.prompt_tokens, n_tok)}
                     if job.continuous_usage else {})
            yield job.chunk("text_completion", [choice], **extra)
            sent_text, sent_tok, first = len(upd.text), n_tok, False
            if upd.finish is not None:
                finals.append(upd)
    if job.include_usage:
        yield job.chunk("text_completion", [], usage=_prompt_usage(job, finals))
    yield DONE
