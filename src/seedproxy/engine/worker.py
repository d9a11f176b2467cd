"""One worker thread that runs generations one at a time.

Invariants:
- Exactly one thread touches the model (its KV cache and forward pass), so a request's
  tokens and logprobs never depend on what else is being served: there is no batching.
- ``torch.set_num_threads(threads)`` is applied on that thread before any work; together
  with float32 GEMVs of fixed shapes this makes results repeat bit for bit on one machine.
  (Different thread counts or CPUs may round differently; the count is fixed per engine.)
- Submitting is thread-safe; ``stream`` bridges updates to an asyncio loop with
  ``call_soon_threadsafe`` as each token is produced. A consumer that goes away cancels
  its job at the next token.
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

from .generator import Generator, GenRequest, Update
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
    """A daemon thread draining a FIFO of generation jobs."""

    def __init__(self, model: EngineModel, threads: int | None = None) -> None:
        self.model = model
        self.threads = threads or default_threads()
        self._jobs: queue.Queue[_Job | None] = queue.Queue()
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

    def _loop(self) -> None:
        torch.set_num_threads(self.threads)
        gen = Generator(self.model)
        with torch.inference_mode():
            while True:
                job = self._jobs.get()
                if job is None:
                    return
                try:
                    gen.run(job.req, job.on_update, job.cancel.is_set)
                except Exception as exc:  # never let one request kill the worker
                    logger.exception("generation failed")
                    gen = Generator(self.model)
                    try:
                        # SGLang's FINISH_ABORT for an internal error: the routes
                        # answer it with a 500.
                        job.on_update(Update([], "", {
                            "type": "abort", "message": f"{type(exc).__name__}: {exc}",
                            "status_code": 500, "err_type": "InternalServerError"},
                            len(job.req.prompt_ids), 0))
                    except Exception:
                        logger.exception("could not report a failed generation")

    def submit(self, req: GenRequest, on_update: Callable[[Update], None],
               cancel: threading.Event | None = None) -> threading.Event:
        """Queue ``req``; ``on_update`` runs on the worker thread. Returns its cancel flag."""
        job = _Job(req, on_update, cancel or threading.Event())
        self._jobs.put(job)
        return job.cancel

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
