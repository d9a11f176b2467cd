"""Raw prompts (text or token ids) in: SGLang's native ``/generate`` and OpenAI's
``/v1/completions``, answered as SGLang does.

Invariants of ``/generate``:
- Unknown top-level keys are ignored; unknown ``sampling_params`` keys are a 400.
- Streaming chunks are cumulative: each carries the whole ``text``/``output_ids`` so far.
- ``meta_info.weight_versions`` spans the output positions by the version each token was
  sampled under.

Invariants of ``/v1/completions`` (SGLang's ``serving_completions.py``):
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
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from ..sse_frames import DONE, data_frame
from .errors import RequestError
from .generator import GenRequest, Update, version_spans
from .params import parse_sampling_params, want_bool, want_int
from .state import EngineState, OpenAIJob, openai_sampling_params, request_id, usage

__all__ = ["CompletionJob", "completion_response", "completion_stream", "generate_response",
           "generate_stream", "parse_completion", "parse_generate"]


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


def parse_generate(state: EngineState, body: dict[str, Any]) -> list[GenRequest]:
    """Turn a ``/generate`` body into one ``GenRequest`` per (prompt, choice)."""
    text, ids = body.get("text"), body.get("input_ids")
    if (text is None) == (ids is None):
        raise RequestError("Either text or input_ids should be provided (but not both).")
    if text is not None:
        prompts = [state.encode(t) for t in (text if isinstance(text, list) else [text])]
    elif isinstance(ids, list) and ids and isinstance(ids[0], list):
        prompts = [state.check_prompt(x) for x in ids]
    else:
        prompts = [state.check_prompt(ids)]
    if not prompts:
        raise RequestError("The input is empty.")
    raw = body.get("sampling_params")
    params = parse_sampling_params(raw, state.model.vocab_size)
    asked = params.max_new_tokens if isinstance(raw, dict) and raw.get(
        "max_new_tokens") is not None else None
    grammar = state.grammar(prompts, params, asked)
    return_logprob = want_bool(body, "return_logprob")
    top_n = want_int(body, "top_logprobs_num", 0) or 0
    start = want_int(body, "logprob_start_len", -1)
    text_too = want_bool(body, "return_text_in_logprobs")
    if return_logprob and start is not None and start >= 0:
        shortest = min(len(p) for p in prompts)
        if start >= shortest:
            raise RequestError(
                f"logprob_start_len ({start}) is higher than the number of input tokens "
                f"({shortest}). Please use a smaller logprob_start_len.",
                param="logprob_start_len")
    rid = body.get("rid")
    return state.fan_out(
        rid if isinstance(rid, str) else uuid.uuid4().hex, prompts, params, grammar,
        return_logprob=return_logprob, top_logprobs_num=max(0, top_n),
        return_input_logprob=return_logprob and start is not None and start >= 0,
        logprob_start_len=max(0, start or 0), return_text_in_logprobs=text_too)


def _item(state: EngineState, req: GenRequest, upd: Update) -> dict[str, Any]:
    """``text``, ``output_ids`` and SGLang's ``meta_info``, whose logprob rows are
    ``[logprob, id, text]`` (the text with ``return_text_in_logprobs``, else null)."""
    start_len = req.logprob_start_len

    def _triples(pairs: list[tuple[float | None, int]]) -> list[list[Any]]:
        return [[lp, tid, state.token_text(tid) if req.return_text_in_logprobs else None]
                for lp, tid in pairs]

    meta: dict[str, Any] = {
        "id": req.rid, "finish_reason": upd.finish, "prompt_tokens": upd.prompt_tokens,
        "weight_version": upd.weight_version, "weight_versions": version_spans(upd.versions),
        "completion_tokens": upd.completion_tokens, "cached_tokens": upd.cached_tokens,
        "e2e_latency": time.perf_counter() - upd.started,
    }
    if req.return_logprob:
        meta["output_token_logprobs"] = _triples(
            list(zip(upd.logprobs, upd.output_ids, strict=True)))
        if req.top_logprobs_num > 0:
            meta["output_top_logprobs"] = [
                _triples([(lp, tid) for tid, lp in top]) for top in upd.top_logprobs]
        if req.return_input_logprob:
            pairs = list(zip(upd.input_logprobs, req.prompt_ids, strict=False))[start_len:]
            meta["input_token_logprobs"] = _triples(pairs)
            if req.top_logprobs_num > 0:
                meta["input_top_logprobs"] = [
                    _triples([(lp, tid) for tid, lp in top]) if i else None
                    for i, top in enumerate(upd.input_top_logprobs)][start_len:]
        else:
            meta["input_token_logprobs"] = []
    return {"text": upd.text, "output_ids": upd.output_ids, "meta_info": meta}


async def generate_response(state: EngineState, reqs: list[GenRequest],
                            batched: bool) -> Any:
    """Non-streaming answer: one object, or a list for a batched request."""
    finals = await state.run_all(reqs)
    items = [_item(state, r, upd) for r, upd in zip(reqs, finals, strict=True)]
    return items if batched or len(items) > 1 else items[0]


async def generate_stream(state: EngineState, reqs: list[GenRequest]) -> AsyncIterator[bytes]:
    """Cumulative SSE chunks for every request, then ``data: [DONE]``."""
    for idx, req in enumerate(reqs):
        async for upd in state.worker.stream(req):
            item = _item(state, req, upd)
            if len(reqs) > 1:
                item["index"] = idx
            yield data_frame(item)
    yield DONE
