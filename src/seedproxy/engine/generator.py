"""The batched decode loop: up to ``max_batch`` sequences advance together, one forward
call per step, each emitting cumulative ``Update``s with the decoded text so far (cut at
stop strings and ``stop_regex``). Worker thread only.

Invariants:
- A sequence's tokens and logprobs do not depend on its batchmates: forward rows are
  row-invariant (``llama.py``), sampling is per row and a ``LogitsProcessor`` sees only
  its own sequence.
- The token at absolute position ``p`` is drawn with noise keyed by ``(seed, p)`` from
  logits of the ids at ``0..p-1`` only, so a prompt extending a cached prefix
  (``cached_tokens``), or a ``retract``ed sequence prefilled again on ``readmit``,
  reproduces a cold run exactly.
- Each step, running sequences get one row each first; prompts being prefilled share the
  remaining rows in arrival order, so a long prompt does not stall the others.
- ``Update.versions``: the weight version each token was sampled under;
  ``weight_version``: the one at the update's emission.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from ..detokenize import IncrementalDecoder
from ..stop_strings import first_stop, held_tail
from .grammar import LogitsProcessor
from .llama import BatchRunner, KVBuffer, PrefixCache
from .model import EngineModel
from .params import GREEDY_EPS, SamplingParams
from .sampler import Sampler

__all__ = ["DEFAULT_CACHE_MB", "DEFAULT_MAX_BATCH", "DEFAULT_WEIGHT_VERSION", "GenRequest",
           "Generator", "Seq", "TextState", "Update", "version_spans"]

DEFAULT_MAX_BATCH = 8
DEFAULT_CACHE_MB = 512
DEFAULT_WEIGHT_VERSION = "default"
_CANCELLED = {"type": "abort", "message": "request cancelled"}


def version_spans(versions: list[str]) -> list[dict[str, Any]]:
    """Runs of equal versions over output positions: ``[{version, start, end}]``."""
    spans: list[dict[str, Any]] = []
    for position, version in enumerate(versions):
        if spans and spans[-1]["version"] == version:
            spans[-1]["end"] = position + 1
        else:
            spans.append({"version": version, "start": position, "end": position + 1})
    return spans


@dataclass(frozen=True)
class GenRequest:
    """One choice to generate; ``logprob_start_len``: the first prompt position whose
    input logprob is shown; ``return_text_in_logprobs``: a logprob row's third slot is its
    token's text, else null (SGLang's fields)."""

    rid: str
    prompt_ids: list[int]
    params: SamplingParams
    return_logprob: bool = False
    top_logprobs_num: int = 0
    return_input_logprob: bool = False
    processor: LogitsProcessor | None = None
    logprob_start_len: int = 0
    return_text_in_logprobs: bool = False


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
    versions: list[str] = field(default_factory=list)
    weight_version: str = DEFAULT_WEIGHT_VERSION

    @property
    def completion_tokens(self) -> int:
        return len(self.output_ids)


class TextState:
    """Decoded text of a growing list of output ids, watching for stop strings
    (``seedproxy.detokenize``, ``seedproxy.stop_strings``): ``text`` is the decoding of all
    output ids so far, cut at the first stop string (kept when ``no_stop_trim``), whatever
    the streaming; each token costs the tokenizer O(1)."""

    def __init__(self, tokenizer: Any, stops: tuple[str, ...], skip_special_tokens: bool,
                 no_stop_trim: bool = False) -> None:
        self._decoder = IncrementalDecoder(
            lambda ids: str(tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)))
        self._stops = stops
        self._keep = no_stop_trim
        self._max_stop = max((len(s) for s in stops), default=0)
        self._fed = 0
        self._done = ""  # the text the decoder released
        self.text = ""

    def update(self, output_ids: list[int]) -> str | None:
        """Decode the new ids of ``output_ids`` (extending the list passed before); return
        the stop string matched now, if any."""
        self._done += "".join(self._decoder.feed(i) for i in output_ids[self._fed:])
        self._fed = len(output_ids)
        full = self._done + self._decoder.pending
        hit = first_stop(full, self._stops, max(0, len(self.text) - self._max_stop))
        if hit is not None:
            at, stop = hit
            self.text = full[: at + len(stop)] if self._keep else full[:at]
            return stop
        self.text = full
        return None

    def stable_text(self, finished: bool) -> str:
        """A prefix of every later ``text``: it withholds a trailing incomplete UTF-8
        sequence and any tail that could still grow into a stop string."""
        if finished:
            return self.text
        text = self.text.rstrip("\ufffd")
        keep = held_tail(text, self._stops)
        return text[: len(text) - keep]


@dataclass
class Seq:
    """One sequence, running or parked by ``retract``: ``tokens`` = prompt + output;
    ``kv.length`` of them are fed."""

    req: GenRequest
    emit: Callable[[Update], None]
    cancelled: Callable[[], bool]
    kv: KVBuffer
    tokens: list[int]
    upd: Update
    text: TextState
    stop_ids: frozenset[int]
    banned: torch.Tensor | None
    limit: int

    @property
    def pending(self) -> int:
        return len(self.tokens) - self.kv.length


def _top(logprobs: torch.Tensor, k: int) -> list[tuple[int, float]]:
    vals, idx = torch.topk(logprobs, min(k, logprobs.numel()))
    return [(int(i), float(v)) for v, i in zip(vals.tolist(), idx.tolist(), strict=True)]


class Generator:
    """Owns the forward pass, the sampler, the running sequences and the prefix cache."""

    def __init__(self, model: EngineModel, max_batch: int = DEFAULT_MAX_BATCH,
                 cache_mb: int = DEFAULT_CACHE_MB, pad: bool | None = None,
                 version: Callable[[], str] | None = None) -> None:
        self.model = model
        self.max_batch = max(1, max_batch)
        self.runner = BatchRunner(model.weights, self.max_batch, pad)
        self.sampler = Sampler(model.vocab_size)
        self.cache = PrefixCache(cache_mb * 1024 * 1024)
        self.running: list[Seq] = []
        self.version = version or (lambda: DEFAULT_WEIGHT_VERSION)

    @property
    def has_room(self) -> bool:
        return len(self.running) < self.max_batch

    def load(self, runner: BatchRunner) -> None:
        """Compute with ``runner``'s weights from the next step; running sequences keep
        their KV, the prefix cache (the old weights') is emptied."""
        self.runner = runner
        self.clear_cache()

    def clear_cache(self) -> None:
        self.cache = PrefixCache(self.cache.capacity_bytes)

    def add(self, req: GenRequest, emit: Callable[[Update], None],
            cancelled: Callable[[], bool]) -> None:
        """Start ``req`` (the caller keeps at most ``max_batch`` running)."""
        p, prompt = req.params, req.prompt_ids
        limit = self.model.context_length - len(prompt)
        if p.max_new_tokens is not None:
            limit = min(limit, p.max_new_tokens)
        upd = Update([], "", None, len(prompt), 0, started=time.perf_counter(),
                     input_logprobs=[None] if req.return_input_logprob else [],
                     input_top_logprobs=[[]] if req.return_input_logprob else [])
        if limit <= 0 and not req.return_input_logprob:
            upd.finish = {"type": "length", "length": 0}
            self._emit(emit, upd)
            return
        kv = self._buffer(list(prompt), upd, limit)
        upd.cached_tokens = kv.length
        stop_ids = set(p.stop_token_ids) | (set() if p.ignore_eos else self.model.eos_token_ids)
        banned, vocab = None, self.model.vocab_size
        if p.min_new_tokens > 0 and stop_ids:
            banned = torch.zeros(vocab, dtype=torch.bool)
            banned[[i for i in stop_ids if 0 <= i < vocab]] = True
        text = TextState(self.model.tokenizer, p.stop, p.skip_special_tokens, p.no_stop_trim)
        self.running.append(Seq(req, emit, cancelled, kv, list(prompt), upd, text,
                                frozenset(stop_ids), banned, limit))

    def _buffer(self, tokens: list[int], upd: Update, limit: int) -> KVBuffer:
        """A KV buffer for ``tokens``, its longest cached prefix copied in. Prompt
        positions whose input logprobs are still to be reported are always fed."""
        cap = len(tokens) - 1
        if upd.input_logprobs:
            cap = min(cap, len(upd.input_logprobs) - 1)
        reuse, cached = self.cache.lookup(tokens) if cap > 0 else (0, None)
        reuse = min(reuse, cap)
        left = limit - len(upd.output_ids)
        kv = self.runner.new_buffer(max(256, len(tokens) + min(max(left, 0), 256)))
        if cached is not None and reuse > 0:
            kv.copy_prefix(cached, reuse)
        return kv

    def retract(self) -> list[Seq]:
        """Park every running sequence (in batch order): its fed prefix goes to the
        prefix cache, its KV is freed."""
        parked, self.running = self.running, []
        for seq in parked:
            self.cache.insert(seq.tokens[: seq.kv.length], seq.kv)
            seq.kv = self.runner.new_buffer(1)
        return parked

    def readmit(self, seq: Seq) -> None:
        seq.kv = self._buffer(seq.tokens, seq.upd, seq.limit)
        self.running.append(seq)

    def reap(self) -> None:
        """End the cancelled running sequences with ``finish_reason`` abort."""
        for seq in [s for s in self.running if s.cancelled()]:
            seq.upd.finish = dict(_CANCELLED)
            self._finish(seq)

    def close(self, seq: Seq) -> None:
        """End a parked ``seq`` as aborted, with its output so far."""
        seq.upd.finish = dict(_CANCELLED)
        seq.upd.text = seq.text.stable_text(True)
        self._emit(seq.emit, seq.upd)

    def batch(self) -> list[tuple[GenRequest, int]]:
        """Each running request and how many tokens it has generated."""
        return [(s.req, len(s.upd.output_ids)) for s in self.running]

    def step(self) -> None:
        """One forward call over the running sequences; emits and retires as they finish."""
        self.reap()
        if not self.running:
            return
        rows = [(s, len(s.tokens) - 1) for s in self.running if s.pending == 1]  # (seq, pos)
        for seq in self.running:
            room = self.max_batch - len(rows)
            if seq.pending > 1 and room > 0:
                start = seq.kv.length
                rows += [(seq, p) for p in range(start, start + min(room, seq.pending))]
        logits = self.runner.forward([s.tokens[p] for s, p in rows], [p for _, p in rows],
                                     [s.kv for s, _ in rows])
        for r, (seq, pos) in enumerate(rows):
            if pos + 1 < len(seq.tokens):
                if pos + 1 < len(seq.req.prompt_ids) and pos + 1 == len(
                        seq.upd.input_logprobs):  # not yet reported (a readmit re-feeds)
                    self._input_logprob(seq, logits[r], seq.tokens[pos + 1])
            elif seq.upd.finish is None:
                self._sample(seq, logits[r], pos + 1)

    def _input_logprob(self, seq: Seq, row: torch.Tensor, token_id: int) -> None:
        """A prompt token's logprob as the sampler reports a sampled one (the
        temperature-scaled distribution; the raw one when greedy), so teacher forcing a
        sampled sequence at its temperature reproduces its logprobs bit for bit."""
        temperature = seq.req.params.temperature
        scaled = row[: self.model.vocab_size]
        if temperature >= GREEDY_EPS:
            scaled = scaled / temperature
        logprobs = torch.log_softmax(scaled, dim=-1)
        seq.upd.input_logprobs.append(float(logprobs[token_id]))
        if seq.req.top_logprobs_num > 0:
            seq.upd.input_top_logprobs.append(_top(logprobs, seq.req.top_logprobs_num))

    def _sample(self, seq: Seq, row: torch.Tensor, pos: int) -> None:
        req, p, upd = seq.req, seq.req.params, seq.upd
        if len(upd.output_ids) >= seq.limit:  # only with input logprobs and no room left
            upd.finish = {"type": "length", "length": 0}
            self._finish(seq)
            return
        if req.processor is not None:
            row = req.processor.process(row, upd.output_ids)
        ban = seq.banned if len(upd.output_ids) < p.min_new_tokens else None
        if ban is not None and req.processor is not None and bool(torch.isneginf(
                row[:ban.numel()][~ban[:row.numel()]]).all()):
            ban = None  # the grammar allows nothing but a stop: it ends before min_new_tokens
        choice = self.sampler.choose(row, p, pos, ban)
        if req.processor is not None:
            req.processor.accept(choice.token_id)
        upd.output_ids.append(choice.token_id)
        upd.versions.append(self.version())
        seq.tokens.append(choice.token_id)
        if req.return_logprob:
            upd.logprobs.append(choice.logprob)
            if req.top_logprobs_num > 0:
                upd.top_logprobs.append(_top(choice.logprobs, req.top_logprobs_num))
        matched = seq.text.update(upd.output_ids)
        if matched is None:  # SGLang's FINISHED_MATCHED_REGEX
            matched = next((pat for pat in p.stop_regex if re.search(pat, seq.text.text)), None)
        if matched is not None:
            upd.finish = {"type": "stop", "matched": matched}
        elif choice.token_id in seq.stop_ids and ban is None:
            upd.finish = {"type": "stop", "matched": choice.token_id}
        elif len(upd.output_ids) >= seq.limit:
            upd.finish = {"type": "length", "length": len(upd.output_ids)}
        if upd.finish is not None:
            self._finish(seq)
        else:
            upd.text = seq.text.stable_text(False)
            self._emit(seq.emit, upd)

    def _finish(self, seq: Seq) -> None:
        """Emit the final update, keep the sequence's prefix, drop it from the batch."""
        seq.upd.text = seq.text.stable_text(True)
        self.running.remove(seq)
        self.cache.insert(seq.tokens[: seq.kv.length], seq.kv)
        self._emit(seq.emit, seq.upd)

    def _emit(self, emit: Callable[[Update], None], upd: Update) -> None:
        """Hand ``emit`` a copy safe to read while generation goes on."""
        emit(replace(upd, output_ids=list(upd.output_ids), logprobs=list(upd.logprobs),
                     top_logprobs=list(upd.top_logprobs), versions=list(upd.versions),
                     weight_version=self.version()))

    def abort_all(self) -> list[tuple[GenRequest, Callable[[Update], None]]]:
        """Forget every running sequence (after a failure); return who to tell."""
        out, self.running = [(s.req, s.emit) for s in self.running], []
        return out

    def run(self, req: GenRequest, emit: Callable[[Update], None],
            cancelled: Callable[[], bool]) -> Update:
        """Generate ``req`` alone to the end (for benchmarks and tools); return the last."""
        last: list[Update] = []

        def keep(upd: Update) -> None:
            last[:] = [upd]
            emit(upd)

        self.add(req, keep, cancelled)
        while self.running:
            self.step()
        return last[0]
