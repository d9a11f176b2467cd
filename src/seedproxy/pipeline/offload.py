"""Large JSON bodies parsed off the event loop, in a pool of worker processes.

orjson holds the GIL while it parses, so a 30 MB body parsed in a thread still stops
every other request (``/healthz`` included). A body over ``threshold`` bytes (a client
body, or an upstream's whole answer) is parsed by ``parse_jobs`` in a worker process,
by the same functions as the in-loop path, so a refusal is the same status and
message either way; the loop only unpickles the result and unpacks its int lists.
Smaller bodies are parsed in the loop.

Invariants:
- At most ``workers + queue`` bodies are in the pool at once (running or waiting);
  one more is refused with 429 (``ParserBusy``) before it is handed over.
- A worker that dies fails every body in its pool with 503 (``ParserUnavailable``),
  and the next body starts a new pool: nothing waits on a dead process.
- An upstream answer refused so is recorded with the error the client is shown
  (``Exchange.fail``), as an upstream's own failure is; a client body is refused
  before it is seated, using no index.
- The pool starts with the first large body (``spawn``: the proxy has threads) and
  ``close`` (the app's lifespan) stops it.
"""

from __future__ import annotations

import asyncio
import multiprocessing
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

import orjson

from ..backends import Endpoint
from ..backends.echo import loads_echoed
from ..errors import ParserBusy, ParserUnavailable
from ..sessions.codec import Sent, Signed
from ..sessions.token_ids import TokenIds
from . import parse_jobs
from .request import decode_body, decode_signed

__all__ = ["Parser"]


class Parser:
    """Parses client bodies and upstream answers, large ones in worker processes."""

    def __init__(self, *, threshold: int | None, workers: int, queue: int,
                 offloaded: Callable[[], None] = lambda: None,
                 hold: str | None = None) -> None:
        """``threshold``: bodies over this many bytes are offloaded (``None``: none);
        ``offloaded`` is called once per offloaded body; ``hold`` is the workers' test
        seam (``parse_jobs._wait``)."""
        self.threshold = threshold
        self.workers = workers
        self.queue = queue
        self._offloaded = offloaded
        self._hold = hold
        self._executor: ProcessPoolExecutor | None = None
        self._pending: set[Future[Any]] = set()

    def offloads(self, size: int) -> bool:
        return self.threshold is not None and size > self.threshold

    async def body(self, endpoint: Endpoint, raw: bytes) -> dict[str, Any]:
        """``decode_body(endpoint, raw)``: its result, or its ``BadRequest``."""
        return (await self.signed_body(endpoint, raw, None, signs=False))[0]

    async def signed_body(self, endpoint: Endpoint, raw: bytes,
                          last: tuple[str, Sent] | None, *, signs: bool = True
                          ) -> tuple[dict[str, Any], Signed | None]:
        """``decode_signed(endpoint, raw, last)`` (``decode_body`` and no signature unless
        ``signs``); an offloaded body is checked whole in the worker, and not signed."""
        if not self.offloads(len(raw)):
            if not signs:
                return decode_body(endpoint, raw), None
            return decode_signed(endpoint, raw, last)
        result = await self._run(parse_jobs.read_body, endpoint, raw, self._hold)
        body: dict[str, Any] = parse_jobs.unpacked(result)
        return body, None

    async def answer(self, content: bytes, known: TokenIds | None = None, *,
                     echoes: bool = False) -> Any:
        """``loads_echoed(content, known)``; raises what it raises. Offloaded with
        ``echoes`` (the backend reads an echoed prompt as a ``TokenIds``), an echoed
        prompt of token ids comes back as one, checked in the worker."""
        if not self.offloads(len(content)):
            return loads_echoed(content, known)
        result = await self._run(parse_jobs.read_answer, content, known, echoes, self._hold)
        if isinstance(result, parse_jobs.Invalid):
            raise orjson.JSONDecodeError(result.message, "", 0)
        return parse_jobs.unpacked(result)

    async def _run(self, job: Callable[..., Any], *args: Any) -> Any:
        if len(self._pending) >= self.workers + self.queue:
            raise ParserBusy(
                f"{len(self._pending)} large bodies are being parsed already; retry shortly")
        executor = self._executor
        if executor is None:
            executor = self._executor = ProcessPoolExecutor(
                self.workers, mp_context=multiprocessing.get_context("spawn"))
        try:
            future = executor.submit(job, *args)
        except BrokenProcessPool:
            raise self._broken(executor) from None
        self._pending.add(future)
        future.add_done_callback(self._pending.discard)
        self._offloaded()
        try:
            return await asyncio.wrap_future(future)
        except BrokenProcessPool:
            raise self._broken(executor) from None

    def _broken(self, executor: ProcessPoolExecutor) -> ParserUnavailable:
        """Drop ``executor`` (a worker died), so the next body starts a new pool."""
        if self._executor is executor:
            self._executor = None
            executor.shutdown(wait=False, cancel_futures=True)
        return ParserUnavailable("the process parsing this body stopped; retry the request")

    async def close(self) -> None:
        """Stop the workers once the bodies they are parsing are done; drop the rest."""
        executor, self._executor = self._executor, None
        if executor is not None:
            await asyncio.to_thread(executor.shutdown, wait=True, cancel_futures=True)
