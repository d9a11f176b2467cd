"""One worker thread running up to ``max_batch`` generations together, and its control
plane, called from any thread: pause and continue (SGLang's three modes), abort, the
weight-version label, weight swaps and cache flushes.

Invariants:
- Exactly one thread touches the model (buffers, prefix cache, forward pass), after
  ``torch.set_num_threads(threads)``. Requests are admitted in arrival order while the
  batch has room and advance one token per step together (``generator.py``).
- Submitting is thread-safe; ``stream`` and ``complete`` bridge updates to an asyncio loop,
  and a consumer that goes away cancels its job at the next step. A control call only
  sets state under ``_cv`` and wakes the worker, which reads it between steps. One swap
  is pending at a time; a flush asked while requests run or wait is refused at once.
- While paused no step runs and nothing is admitted: ``abort`` cancels every request
  running or queued; ``in_place`` keeps the batch and its KV; ``retract`` parks the batch
  at the front of the queue, in order, to be prefilled again. Cancelled requests end
  (abort, output so far) even while paused.
- A weight swap happens between steps: when paused, at once (``in_place`` requests go on
  with their KV, ``retract``ed ones are prefilled again); else once the running requests
  have finished, admitting none meanwhile (SGLang's weight-update lock). The prefix cache
  is emptied and the version, when given, changes in the same step.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Literal, cast

import torch

from .generator import (
    DEFAULT_CACHE_MB,
    DEFAULT_MAX_BATCH,
    DEFAULT_WEIGHT_VERSION,
    Generator,
    GenRequest,
    Seq,
    Update,
)
from .llama import BatchRunner
from .model import EngineModel

__all__ = ["PAUSE_MODES", "PauseMode", "StepHook", "Worker", "answer", "default_threads"]

logger = logging.getLogger("seedproxy.engine")

PauseMode = Literal["abort", "in_place", "retract"]
PAUSE_MODES: tuple[PauseMode, ...] = ("abort", "in_place", "retract")

StepHook = Callable[[list[tuple[GenRequest, int]]], None]
"""A test seam run on the worker thread after each step, with the batch."""


def answer() -> tuple[asyncio.Future[Any], Callable[[Any], None]]:
    """A future on the running loop, and the function that sets it (once) from any thread."""
    loop = asyncio.get_running_loop()
    result: asyncio.Future[Any] = loop.create_future()

    def settle(value: Any) -> None:
        if not result.done():
            result.set_result(value)

    def done(value: Any) -> None:
        try:
            loop.call_soon_threadsafe(settle, value)
        except RuntimeError:  # the loop is gone: nobody waits for the answer
            pass

    return result, done


def default_threads() -> int:
    """``$SEEDPROXY_ENGINE_THREADS``, else the number of CPUs (at least 1)."""
    env = os.environ.get("SEEDPROXY_ENGINE_THREADS")
    if env and env.isdigit() and int(env) > 0:
        return int(env)
    return max(1, os.cpu_count() or 1)


@dataclass
class _Swap:
    runner: BatchRunner
    version: str | None
    done: Callable[[int | None], None]
    """Gets how many requests were held paused across the swap, None if the worker
    stopped first."""


@dataclass
class _Job:
    req: GenRequest
    on_update: Callable[[Update], None]
    cancel: threading.Event


class Worker:
    """A daemon thread admitting queued jobs into one batched ``Generator``."""

    def __init__(self, model: EngineModel, threads: int | None = None,
                 max_batch: int = DEFAULT_MAX_BATCH, cache_mb: int = DEFAULT_CACHE_MB,
                 on_step: StepHook | None = None) -> None:
        self.model = model
        self.threads = threads or default_threads()
        self.max_batch = max(1, max_batch)
        self.cache_mb = max(0, cache_mb)
        self.on_step = on_step
        self.weight_version = DEFAULT_WEIGHT_VERSION
        # Under _cv: jobs not yet admitted (after the sequences a retract parked), the
        # pause, "a paused worker has something to do", the pending swap and flushes, and
        # whether requests are running (set by the worker between steps).
        self._cv = threading.Condition()
        self._waiting: deque[_Job | Seq] = deque()
        self._paused: PauseMode | None = None
        self._poked = False
        self._stopping = False
        self._swap: _Swap | None = None
        self._flushes: list[Callable[[bool], None]] = []
        self._busy = False
        self._live: dict[str, threading.Event] = {}  # cancel flags of unfinished requests
        self._thread: threading.Thread | None = None
        self._after_first: Callable[[], object] | None = None
        self.running = 0  # requests in the batch (written by the worker thread only)

    def start(self, after_first_answer: Callable[[], object] | None = None) -> None:
        """Start the worker thread; ``after_first_answer`` runs once on it, when the
        batch first empties after a step."""
        if self._thread is None:
            self._stopping = False
            self._after_first = after_first_answer
            self._thread = threading.Thread(target=self._loop, name="seedproxy-engine",
                                            daemon=True)
            self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            with self._cv:
                self._stopping = True
                self._cv.notify_all()
            self._thread.join(timeout=30)
            self._thread = None
        with self._cv:
            swap, self._swap = self._swap, None
        if swap is not None:
            swap.done(None)

    def _swap_in(self, gen: Generator, swap: _Swap, mode: PauseMode | None) -> None:
        if mode is not None:  # a retract parks the batch before the keys change
            self._hold(gen, mode)
        with self._cv:
            held = len(gen.running) + sum(isinstance(e, Seq) for e in self._waiting)
            gen.load(swap.runner)
            self.model.weights = swap.runner.w
            if swap.version is not None:
                self.weight_version = swap.version
        swap.done(held)

    def _generator(self) -> Generator:
        return Generator(self.model, self.max_batch, self.cache_mb,
                         version=lambda: self.weight_version)

    def _loop(self) -> None:
        torch.set_num_threads(self.threads)
        with torch.inference_mode():
            gen = self._generator()
            while True:
                with self._cv:
                    self._busy = bool(gen.running)
                    swap = None
                    while not self._stopping and not self._flushes:
                        if self._swap is not None and (self._paused is not None
                                                       or not gen.running):
                            swap, self._swap = self._swap, None
                            break
                        if self._paused is not None and self._poked:
                            self._poked = False
                            break
                        if self._paused is None and (self._waiting or gen.running):
                            break
                        self._cv.wait()
                    if self._stopping:
                        return
                    flushes, self._flushes = self._flushes, []
                    idle = not gen.running and not self._waiting
                    mode = self._paused
                    admitted: list[_Job | Seq] = []
                    while mode is None and self._swap is None and self._waiting and (
                            len(gen.running) + len(admitted) < self.max_batch):
                        admitted.append(self._waiting.popleft())
                    self._busy = bool(gen.running or admitted)
                if flushes and idle:
                    gen.clear_cache()
                for done in flushes:
                    done(idle)
                if swap is not None:
                    self._swap_in(gen, swap, mode)
                elif mode is not None:
                    self._hold(gen, mode)
                else:
                    gen = self._step(gen, admitted)
                self.running = len(gen.running)

    def _step(self, gen: Generator, admitted: list[_Job | Seq]) -> Generator:
        """Admit, then advance the batch one token; returns the generator to go on with."""
        for entry in admitted:
            if isinstance(entry, Seq):
                gen.readmit(entry)
                continue
            try:
                gen.add(entry.req, entry.on_update, entry.cancel.is_set)
            except Exception as exc:  # never let one request kill the worker
                self._fail([(entry.req, entry.on_update)], exc)
        if not gen.running:
            return gen
        try:
            gen.step()
            if self.on_step is not None:
                self.on_step(gen.batch())
        except Exception as exc:  # a failed step fails its batch, not the worker
            self._fail(gen.abort_all(), exc)
            return self._generator()
        if not gen.running and self._after_first is not None:
            hook, self._after_first = self._after_first, None
            hook()
        return gen

    def _ended(self, req: GenRequest, finish: dict[str, Any]) -> Update:
        return Update([], "", finish, len(req.prompt_ids), 0,
                      weight_version=self.weight_version)

    def _hold(self, gen: Generator, mode: PauseMode) -> None:
        """While paused: park a ``retract``ed batch; end what was cancelled."""
        if mode == "retract":
            parked = gen.retract()
            with self._cv:
                self._waiting.extendleft(reversed(parked))
        gen.reap()
        with self._cv:
            gone = [e for e in self._waiting
                    if (e.cancelled() if isinstance(e, Seq) else e.cancel.is_set())]
            for entry in gone:
                self._waiting.remove(entry)
        for entry in gone:
            if isinstance(entry, Seq):
                gen.close(entry)
            else:
                entry.on_update(self._ended(entry.req, {"type": "abort",
                                                        "message": "request cancelled"}))

    def _fail(self, jobs: list[tuple[GenRequest, Callable[[Update], None]]],
              exc: Exception) -> None:
        logger.error("generation failed", exc_info=exc)
        for req, on_update in jobs:
            try:  # SGLang's FINISH_ABORT for an internal error: the routes answer a 500.
                on_update(self._ended(req, {
                    "type": "abort", "message": f"{type(exc).__name__}: {exc}",
                    "status_code": 500, "err_type": "InternalServerError"}))
            except Exception:
                logger.exception("could not report a failed generation")

    def submit(self, req: GenRequest, on_update: Callable[[Update], None],
               cancel: threading.Event) -> None:
        """Queue ``req``; ``on_update`` runs on the worker thread. ``abort(req.rid)`` sets
        ``cancel`` until the request finishes."""
        self._live[req.rid] = cancel

        def report(upd: Update) -> None:
            if upd.finish is not None:
                self._live.pop(req.rid, None)
            on_update(upd)

        with self._cv:
            self._waiting.append(_Job(req, report, cancel))
            self._cv.notify_all()

    async def stream(self, req: GenRequest) -> AsyncIterator[Update]:
        """Yield the cumulative updates of ``req`` on the running loop, ending at finish."""
        loop = asyncio.get_running_loop()
        updates: asyncio.Queue[Update] = asyncio.Queue()
        cancel = threading.Event()

        def push(upd: Update) -> None:
            try:
                loop.call_soon_threadsafe(updates.put_nowait, upd)
            except RuntimeError:  # the loop is gone: nobody is listening any more
                cancel.set()

        self.submit(req, push, cancel)
        try:
            while True:
                upd = await updates.get()
                yield upd
                if upd.finish is not None:
                    return
        finally:
            cancel.set()

    async def complete(self, req: GenRequest, on_final: Callable[[str, Update], None]
                       ) -> Update:
        """Run ``req`` to its end and return the final update, which ``on_final(rid, upd)``
        sees first, on the worker thread."""
        result, done = answer()
        cancel = threading.Event()

        def on_update(upd: Update) -> None:
            if upd.finish is not None:
                on_final(req.rid, upd)
                done(upd)

        self.submit(req, on_update, cancel)
        try:
            return cast(Update, await result)
        finally:
            cancel.set()  # the caller went away: the job stops at the next token

    @property
    def paused(self) -> PauseMode | None:
        return self._paused

    @property
    def swap_pending(self) -> bool:
        return self._swap is not None

    @property
    def waiting(self) -> int:
        """Requests queued and not admitted (parked ones included)."""
        return len(self._waiting)

    def _poke(self) -> None:
        with self._cv:  # reentrant: callers may hold it
            self._poked = True
            self._cv.notify_all()

    def pause(self, mode: PauseMode) -> None:
        """Stop stepping before the next step (``abort`` cancels every request running or
        queued now). Returns at once."""
        with self._cv:
            self._paused = mode
            self._poke()
        if mode == "abort":
            self.abort(None)

    def resume(self) -> None:
        with self._cv:
            self._paused = None
            self._cv.notify_all()

    def set_weight_version(self, version: str, *, abort_all: bool) -> None:
        """Label the tokens sampled from now on ``version``; ``abort_all`` ends every
        request running or queued with ``finish_reason`` abort."""
        with self._cv:
            self.weight_version = version
        if abort_all:
            self.abort(None)

    async def load_weights(self, runner: BatchRunner, version: str | None) -> int | None:
        """Swap in ``runner``'s weights (labelled ``version`` when given) at the worker's next
        chance; return how many requests were held paused across the swap, or None when
        the worker stopped first."""
        result, done = answer()
        with self._cv:
            if self._swap is not None:
                raise RuntimeError("a weight swap is already pending")
            self._swap = _Swap(runner, version, done)
            self._poke()
        return cast("int | None", await result)

    async def flush_cache(self) -> bool:
        """Empty the prefix cache at the worker's next chance; False (and nothing done)
        when requests are running or waiting then."""
        result, done = answer()
        with self._cv:
            if self._busy or self._waiting:  # answered now: a held step cannot delay it
                return False
            self._flushes.append(done)
            self._poke()
        return bool(await result)

    def abort(self, rid: str | None) -> None:
        """Cancel the running or queued requests named ``rid`` (a request's own rid, or
        the base of its ``rid-i`` choices), every one when None; each ends with
        ``finish_reason`` abort at its next step (at once when paused)."""
        for name, flag in list(self._live.items()):
            if rid is None or name == rid or name.startswith(rid + "-"):
                flag.set()
        self._poke()

    def stopping(self, rid: str) -> bool:
        """Whether the unfinished request ``rid`` has been told to stop."""
        flag = self._live.get(rid)
        return flag is not None and flag.is_set()
