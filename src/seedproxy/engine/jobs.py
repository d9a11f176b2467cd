"""Waiting for a non-streamed generation, and a record of how generations ended.

Invariants:
- ``complete`` submits one job and waits for its final update; if the waiting task is
  cancelled (its client went away) the job's cancel flag is set, so the worker stops it at
  the next token instead of generating to ``max_new_tokens``.
- ``JobLog`` keeps the last ``maxlen`` final updates by rid (a bounded deque, appended from
  the worker thread): operators and tests can see that an abandoned job was aborted.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from dataclasses import dataclass

from .generator import GenRequest, Update
from .worker import Worker

__all__ = ["Finished", "JobLog", "complete"]


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


async def complete(worker: Worker, log: JobLog, req: GenRequest) -> Update:
    """Run ``req`` to its end and return the final update; cancelling stops the job."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[Update] = loop.create_future()
    cancel = threading.Event()

    def deliver(upd: Update) -> None:
        if not done.done():
            done.set_result(upd)

    def on_update(upd: Update) -> None:
        if upd.finish is None:
            return
        log.record(req.rid, upd)
        try:
            loop.call_soon_threadsafe(deliver, upd)
        except RuntimeError:  # the loop is gone: nobody is waiting any more
            pass

    worker.submit(req, on_update, cancel)
    try:
        return await done
    finally:
        cancel.set()
