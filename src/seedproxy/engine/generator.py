"""The decode loop: prompt ids in, a stream of cumulative ``Update``s out.

Invariants:
- Runs on the worker thread only (it owns the model's KV cache).
- The KV cache is kept between requests; a new prompt reuses the longest common prefix of
  the previous sequence (``cached_tokens``). Because every position is computed by the same
  single-token step, reuse is bit-identical to recomputing.
- The token at absolute position ``p`` (prompt length + tokens generated so far) is drawn
  with noise keyed by ``(seed, p)``; its logits depend only on the ids at ``0..p-1``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from .llama import LlamaRunner
from .logits import LogitsProcessor
from .model import EngineModel
from .params import GREEDY_EPS, SamplingParams
from .sampler import Sampler
from .stop_regex import match_stop_regex
from .text import TextState

__all__ = ["GenRequest", "Generator", "Update"]


@dataclass(frozen=True)
class GenRequest:
    """One choice to generate. ``rid`` is echoed as ``meta_info.id``."""

    rid: str
    prompt_ids: list[int]
    params: SamplingParams
    return_logprob: bool = False
    top_logprobs_num: int = 0
    return_input_logprob: bool = False
    processor: LogitsProcessor | None = field(default=None, compare=False)


@dataclass
class Update:
    """Cumulative state after a token (or at the end). ``finish`` is None until the last."""

    output_ids: list[int]
    text: str
    finish: dict[str, Any] | None
    prompt_tokens: int
    cached_tokens: int
    logprobs: list[float] = field(default_factory=list)
    top_logprobs: list[list[tuple[int, float]]] = field(default_factory=list)
    input_logprobs: list[float | None] = field(default_factory=list)
    started: float = 0.0
    input_top_logprobs: list[list[tuple[int, float]]] = field(default_factory=list)

    def snapshot(self) -> Update:
        """A copy safe to hand to another thread while generation goes on."""
        return Update(list(self.output_ids), self.text, self.finish, self.prompt_tokens,
                      self.cached_tokens, list(self.logprobs), list(self.top_logprobs),
                      self.input_logprobs, self.started, self.input_top_logprobs)

    @property
    def completion_tokens(self) -> int:
        return len(self.output_ids)


def _top(logprobs: torch.Tensor, k: int) -> list[tuple[int, float]]:
    vals, idx = torch.topk(logprobs, min(k, logprobs.numel()))
    return [(int(i), float(v)) for v, i in zip(vals.tolist(), idx.tolist(), strict=True)]


class Generator:
    """Owns the forward pass, the sampler and the cached sequence."""

    def __init__(self, model: EngineModel) -> None:
        self.model = model
        self.runner = LlamaRunner(model.weights)
        self.sampler = Sampler(model.vocab_size)
        self._cached: list[int] = []

    def _prefill(self, prompt: list[int], want_input_logprobs: bool, temperature: float = 1.0,
                 top_n: int = 0) -> tuple[torch.Tensor, int, list[float | None],
                                          list[list[tuple[int, float]]]]:
        """Run the prompt; return the last logits, the reused length and input logprobs."""
        reuse = 0
        limit = min(len(self._cached), len(prompt) - 1)
        while reuse < limit and self._cached[reuse] == prompt[reuse]:
            reuse += 1
        if want_input_logprobs:
            reuse = 0
        self._cached = self._cached[:reuse]
        input_lps: list[float | None] = [None]
        input_tops: list[list[tuple[int, float]]] = [[]]
        logits = torch.empty(0)
        for pos in range(reuse, len(prompt)):
            logits = self.runner.step(prompt[pos], pos)
            self._cached.append(prompt[pos])
            if want_input_logprobs and pos + 1 < len(prompt):
                input_lps.append(self._input_logprob(logits, temperature, prompt[pos + 1]))
                if top_n > 0:
                    input_tops.append(_top(torch.log_softmax(logits, -1), top_n))
        return logits, reuse, input_lps, input_tops

    def _input_logprob(self, logits: torch.Tensor, temperature: float, token_id: int) -> float:
        """A prompt token's logprob computed as the sampler reports a sampled one (the
        temperature-scaled distribution; the raw one when greedy), so teacher forcing
        a sampled sequence at its temperature reproduces its logprobs bit for bit."""
        row = logits[: self.model.vocab_size]
        if temperature >= GREEDY_EPS:
            row = row / temperature
        return float(torch.log_softmax(row, dim=-1)[token_id])

    def run(self, req: GenRequest, emit: Callable[[Update], None],
            cancelled: Callable[[], bool]) -> Update:
        """Generate ``req``, calling ``emit`` after every token; return the final update."""
        started = time.perf_counter()
        p = req.params
        tok = self.model.tokenizer
        ctx = self.model.context_length
        prompt = req.prompt_ids
        logits, cached, input_lps, input_tops = self._prefill(
            prompt, req.return_input_logprob, req.params.temperature, req.top_logprobs_num)
        text = TextState(tok, p.stop, p.skip_special_tokens, p.no_stop_trim)
        upd = Update([], "", None, len(prompt), cached, started=started,
                     input_logprobs=input_lps if req.return_input_logprob else [],
                     input_top_logprobs=input_tops if req.return_input_logprob else [])
        limit = ctx - len(prompt)
        if p.max_new_tokens is not None:
            limit = min(limit, p.max_new_tokens)
        stop_ids = set(p.stop_token_ids)
        if not p.ignore_eos:
            stop_ids |= set(self.model.eos_token_ids)
        banned = None
        if p.min_new_tokens > 0 and stop_ids:
            banned = torch.zeros(self.model.vocab_size, dtype=torch.bool)
            banned[[i for i in stop_ids if 0 <= i < self.model.vocab_size]] = True
        if limit <= 0:
            upd.finish = {"type": "length", "length": 0}
            emit(upd.snapshot())
            return upd
        while True:
            pos = len(prompt) + len(upd.output_ids)
            if cancelled():
                upd.finish = {"type": "abort", "message": "request cancelled"}
                break
            ban = banned if len(upd.output_ids) < p.min_new_tokens else None
            if req.processor is not None:
                logits = req.processor.process(logits, upd.output_ids)
            choice = self.sampler.choose(logits, p, pos, ban)
            if req.processor is not None:
                req.processor.accept(choice.token_id)
            upd.output_ids.append(choice.token_id)
            if req.return_logprob:
                upd.logprobs.append(choice.logprob)
                if req.top_logprobs_num > 0:
                    upd.top_logprobs.append(_top(choice.logprobs, req.top_logprobs_num))
            matched = text.update(upd.output_ids)
            if matched is None and p.stop_regex:
                matched = match_stop_regex(p.stop_regex, text.text)
            if matched is not None:
                upd.finish = {"type": "stop", "matched": matched}
            elif choice.token_id in stop_ids and len(upd.output_ids) > p.min_new_tokens - 1:
                upd.finish = {"type": "stop", "matched": choice.token_id}
            elif len(upd.output_ids) >= limit:
                upd.finish = {"type": "length", "length": len(upd.output_ids)}
            upd.text = text.stable_text(upd.finish is not None)
            emit(upd.snapshot())
            if upd.finish is not None:
                return upd
            logits = self.runner.step(choice.token_id, pos)
            self._cached.append(choice.token_id)
        upd.text = text.stable_text(True)
        emit(upd.snapshot())
        return upd
