"""One worker thread that runs up to ``max_batch`` generations together.

Invariants:
- Exactly one thread touches the model (its buffers, prefix cache and forward pass).
  Requests are admitted in arrival order whenever the batch has room and advance one
  token per step together; a request's tokens and logprobs never depend on its
  batchmates (see ``generator.py``), only on the engine's fixed configuration.
- ``torch.set_num_threads(threads)`` is applied on that thread before any work; results
  repeat bit for bit on one machine, torch build and thread count.
- Submitting is thread-safe; ``stream`` bridges updates to an asyncio loop with
  ``call_soon_threadsafe`` as each token is produced. A consumer that goes away cancels
  its job at the next step.
"""

from __future__ import annotations

import asyncio
import logging
import os
import queue
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import torch

from .generator import DEFAULT_CACHE_MB, DEFAULT_MAX_BATCH, Generator, GenRequest, Update
from .model import EngineModel

__all__ = ["Worker", "default_threads"]

logger = logging.getLogger("seedproxy.engine")


def default_threads() -> int:
    """``$SEEDPROXY_ENGINE_THREADS``, else the number of CPUs (at least 1)."""
    env = os.environ.get("SEEDPROXY_ENGINE_THREADS")
    if env and env.isdigit() and int(env) > 0:
        return int(env)
    return max(1, os.cpu_count() or 1)


@dataclass
class _Job:
    req: GenRequest
    on_update: Callable[[Update], None]
    cancel: threading.Event = field(default_factory=threading.Event)


class Worker:
    """A daemon thread admitting queued jobs into one batched ``Generator``."""

    def __init__(self, model: EngineModel, threads: int | None = None,
                 max_batch: int = DEFAULT_MAX_BATCH, cache_mb: int = DEFAULT_CACHE_MB
                 ) -> None:
        self.model = model
        self.threads = threads or default_threads()
        self.max_batch = max(1, max_batch)
        self.cache_mb = max(0, cache_mb)
        self._jobs: queue.Queue[_Job | None] = queue.Queue()
        self._live: dict[str, threading.Event] = {}
        """Cancel flags of the requests submitted and not yet finished, by rid."""
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="seedproxy-engine",
                                            daemon=True)
            self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._jobs.put(None)
            self._thread.join(timeout=30)
            self._thread = None

    def _generator(self) -> Generator:
        return Generator(self.model, self.max_batch, self.cache_mb)

    def _loop(self) -> None:
        torch.set_num_threads(self.threads)
        with torch.inference_mode():
            gen = self._generator()
            while True:
                block = not gen.running
                while gen.has_room:
                    try:
                        job = self._jobs.get(block=block)
                    except queue.Empty:
                        break
                    if job is None:
                        return
                    block = False
                    try:
                        gen.add(job.req, job.on_update, job.cancel.is_set)
                    except Exception as exc:  # never let one request kill the worker
                        self._fail([(job.req, job.on_update)], exc)
                if not gen.running:
                    continue
                try:
                    gen.step()
                except Exception as exc:  # a failed step fails its batch, not the worker
                    failed = gen.abort_all()
                    gen = self._generator()
                    self._fail(failed, exc)

    @staticmethod
    def _fail(jobs: list[tuple[GenRequest, Callable[[Update], None]]],
              exc: Exception) -> None:
        logger.error("generation failed", exc_info=exc)
        for req, on_update in jobs:
            try:
                # SGLang's FINISH_ABORT for an internal error: the routes answer a 500.
                on_update(Update([], "", {
                    "type": "abort", "message": f"{type(exc).__name__}: {exc}",
                    "status_code": 500, "err_type": "InternalServerError"},
                    len(req.prompt_ids), 0))
            except Exception:
                logger.exception("could not report a failed generation")

    def submit(self, req: GenRequest, on_update: Callable[[Update], None],
               cancel: threading.Event | None = None) -> threading.Event:
        """Queue ``req``; ``on_update`` runs on the worker thread. Returns its cancel flag,
        which ``abort(req.rid)`` also sets until the request finishes."""
        flag = cancel or threading.Event()
        self._live[req.rid] = flag

        def report(upd: Update) -> None:
            if upd.finish is not None:
                self._live.pop(req.rid, None)
            on_update(upd)

        self._jobs.put(_Job(req, report, flag))
        return flag

    def abort(self, rid: str | None) -> int:
        """Cancel the running or queued requests named ``rid`` (a request's own rid, or
        the base of its ``rid-i`` choices); every one when ``rid`` is None. Returns how
        many were told; each ends with ``finish_reason`` abort at its next step."""
        told = 0
        for name, flag in list(self._live.items()):
            if rid is None or name == rid or name.startswith(rid + "-"):
                flag.set()
                told += 1
        return told

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

    async def complete(self, req: GenRequest) -> Update:
        """Run ``req`` to the end and return its final update."""
        last: Update | None = None
        async for upd in self.stream(req):
            last = upd
        assert last is not None
        return last
