"""Large JSON bodies parsed off the event loop, in a pool of worker processes.

orjson holds the GIL while it parses, so a 30 MB body parsed in a thread still stops
every other request. A body over ``threshold`` bytes (a client body, or an upstream's
whole answer) is parsed by ``parse_jobs`` in a worker process, by the same functions
as the in-loop path, so a refusal is the same status and message either way.

Invariants:
- At most ``workers + queue`` callers wait on the pool at once; one more is refused
  with 429 (``ParserBusy``). A caller that stops waiting (its client left) gives its
  place back at once, even while the worker still runs its body.
- A worker that dies fails every body in its pool with 503 (``ParserUnavailable``),
  and the next body starts a new pool: nothing waits on a dead process.
- A body not parsed ``timeout_s`` after it was handed over is a 503 too: the pool's
  workers are killed (failing its other bodies), and the next body starts a new pool.
  A pool is started (every worker up) before any body is handed to it, so its start
  never counts against ``timeout_s``.
- An upstream answer refused so is recorded with the error the client is shown; a
  client body is refused before it is seated, using no index.
- The pool starts with the first large body (``spawn``: the proxy has threads) and
  ``close`` (the app's lifespan) stops it.
"""

from __future__ import annotations

import asyncio
import multiprocessing
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

import orjson

from ..dialects import Endpoint
from ..dialects.echo import loads_echoed
from ..errors import ParserBusy, ParserUnavailable, UpstreamError
from ..fleet.upstream import UpstreamReply
from ..sessions.codec import Sent, Signed
from ..sessions.token_ids import TokenIds
from . import parse_jobs
from .request import decode_body, decode_signed

__all__ = ["Parser"]


class Parser:
    """Parses client bodies and upstream answers, large ones in worker processes."""

    def __init__(self, *, threshold: int | None, workers: int, queue: int,
                 timeout_s: float = 30.0, offloaded: Callable[[], None] = lambda: None,
                 hold: str | None = None) -> None:
        """``threshold``: bodies over this many bytes are offloaded (``None``: none);
        ``offloaded`` is called once per offloaded body; ``hold``: the workers' test
        seam (``parse_jobs._wait``)."""
        self.threshold = threshold
        self.workers = workers
        self.queue = queue
        self.timeout_s = timeout_s
        self._offloaded = offloaded
        self._hold = hold
        self._executor: ProcessPoolExecutor | None = None
        self._started: asyncio.Future[Any] | None = None  # every worker up
        self._waiting = 0

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
        if self.offloads(len(raw)):
            result = await self._run(parse_jobs.read_body, endpoint, raw, self._hold)
            return parse_jobs.unpacked(result), None
        return decode_signed(endpoint, raw, last) if signs else (decode_body(endpoint, raw), None)

    async def answer(self, content: bytes, known: TokenIds | None = None, *,
                     echoes: bool = False) -> Any:
        """``loads_echoed(content, known)``; raises what it raises. Offloaded with
        ``echoes``, an echoed prompt of token ids comes back as a ``TokenIds``."""
        if not self.offloads(len(content)):
            return loads_echoed(content, known)
        result = await self._run(parse_jobs.read_answer, content, known, echoes, self._hold)
        if isinstance(result, parse_jobs.Invalid):
            raise orjson.JSONDecodeError(result.message, "", 0)
        return parse_jobs.unpacked(result)

    async def reply_answer(self, reply: UpstreamReply) -> Any:
        """``reply``'s JSON answer, parsed once (a sender that read it already kept it)."""
        if reply.parsed is not None:
            return reply.parsed[0]
        try:
            return await self.answer(reply.response.content)
        except orjson.JSONDecodeError:
            raise UpstreamError(f"upstream {reply.upstream} returned invalid JSON") from None

    async def _run(self, job: Callable[..., Any], *args: Any) -> Any:
        if self._waiting >= self.workers + self.queue:
            raise ParserBusy(
                f"{self._waiting} large bodies are being parsed already; retry shortly")
        self._waiting += 1
        try:
            executor = await self._pool()
            try:
                future = executor.submit(job, *args)
            except BrokenProcessPool:
                raise self._broken(executor) from None
            self._offloaded()
            try:
                return await asyncio.wait_for(asyncio.wrap_future(future), self.timeout_s)
            except TimeoutError:
                raise self._stuck(executor) from None
            except BrokenProcessPool:
                raise self._broken(executor) from None
        finally:
            self._waiting -= 1

    async def _pool(self) -> ProcessPoolExecutor:
        """The pool, started (one ``ready`` job per worker, so each worker is up)."""
        executor, started = self._executor, self._started
        if executor is None or started is None:
            executor = self._executor = ProcessPoolExecutor(
                self.workers, mp_context=multiprocessing.get_context("spawn"))
            started = self._started = asyncio.ensure_future(asyncio.gather(
                *(asyncio.wrap_future(executor.submit(parse_jobs.ready))
                  for _ in range(self.workers))))
        try:
            await asyncio.shield(started)
        except BrokenProcessPool:
            raise self._broken(executor) from None
        return executor

    def _broken(self, executor: ProcessPoolExecutor) -> ParserUnavailable:
        """Drop ``executor`` (a worker died), so the next body starts a new pool."""
        self._drop(executor)
        return ParserUnavailable("the process parsing this body stopped; retry the request")

    def _stuck(self, executor: ProcessPoolExecutor) -> ParserUnavailable:
        """Kill ``executor``'s workers (one is stuck past the bound) and drop it."""
        self._drop(executor, kill=True)
        return ParserUnavailable(
            f"parsing this body took longer than {self.timeout_s:g} s "
            "(--offload-parse-timeout-s): the parse workers were restarted; retry the "
            "request")

    def _drop(self, executor: ProcessPoolExecutor, *, kill: bool = False) -> None:
        if self._executor is executor:
            for process in list(executor._processes.values()) if kill else ():
                process.kill()  # SIGKILL: a stopped (SIGSTOP) process dies too
            self._executor = self._started = None
            executor.shutdown(wait=False, cancel_futures=True)

    async def close(self) -> None:
        """Stop the workers once the bodies they are parsing are done; drop the rest."""
        executor, self._executor, self._started = self._executor, None, None
        if executor is not None:
            await asyncio.to_thread(executor.shutdown, wait=True, cancel_futures=True)
