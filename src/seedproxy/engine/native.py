"""SGLang's native ``/generate`` route.

Invariants:
- Unknown top-level keys are ignored; unknown ``sampling_params`` keys are a 400.
- Streaming chunks are cumulative: each carries the whole ``text``/``output_ids`` so far.
- ``meta_info.weight_versions`` spans the output positions by the version each token was
  sampled under.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from ..sse_frames import DONE, data_frame
from .errors import RequestError
from .generator import GenRequest, Update, version_spans
from .params import parse_sampling_params, want_bool, want_int
from .state import EngineState

__all__ = ["generate_response", "generate_stream", "parse_generate"]


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
