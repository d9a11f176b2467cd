"""A streamed answer: the one stream loop, and the response that sends it.

Unlike Starlette's ``StreamingResponse`` (a new task per stream), the head goes out
at once from the handler's own task, and each chunk the moment the loop yields it. A
watcher task cancels the stream when the client disconnects, stopping the upstream
call at once. The loop is always closed in this task, then ``_finish`` runs on every
path: a client that left (a disconnect, a cancellation, or a ``send`` that raised)
makes the interaction abandoned.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Any

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from ..dialects import Captured
from ..errors import UpstreamError
from .call import UpstreamCall
from .observer import Observer
from .presenters import Writer
from .recorder import Recorder, Snapshot

if TYPE_CHECKING:
    from .readers import Reader

__all__ = ["StreamResponse"]

log = logging.getLogger("seedproxy.request")


async def _events(call: UpstreamCall, recorder: Recorder, reader: Reader, writer: Writer,
                  snapshot: Snapshot) -> AsyncGenerator[bytes, None]:
    """THE stream loop: each chunk shown as it arrives; recorded just before the
    terminator, so the client sees the end only once it is recorded. A failure ends the
    stream with the protocol's error event instead, and the record says its status
    (with the tokens so far); seedproxy's own bug is recorded as a 500 and raised."""
    try:
        async for chunk in reader.chunks(call):
            for out in writer.feed(chunk):
                yield out
        closing = writer.finish()
        call.end()
        unrecorded = await recorder.seal(snapshot)
        if unrecorded is not None:
            yield writer.error(unrecorded)
            return
        for out in closing:
            yield out
    except UpstreamError as exc:  # a broken stream, an error event, a malformed chunk
        log.warning("upstream %s failed mid-stream: %s", call.upstream, exc.message)
        recorder.stream_failed(exc.status_code)
        yield writer.error(exc)
    except Exception:
        recorder.stream_failed(500)  # seedproxy's own bug: recorded as such, and raised
        raise


class StreamResponse(Response):
    """The client's stream of ``reader``'s chunks, shown by ``writer``."""

    def __init__(self, call: UpstreamCall, recorder: Recorder, observer: Observer,
                 reader: Reader, writer: Writer) -> None:
        def snapshot() -> tuple[Any, Captured]:
            return reader.recorded(writer.result()), reader.captured()

        self.events = _events(call, recorder, reader, writer, snapshot)
        self.call, self.recorder, self.observer = call, recorder, observer
        self.snapshot = snapshot
        self.status_code = 200
        self.media_type = "text/event-stream"
        self.background = None
        self.init_headers({**observer.headers(), "cache-control": "no-cache"})
        call.take_replies()  # last: nothing after this may fail before __call__ runs

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        task = asyncio.current_task()
        assert task is not None
        streaming = True
        disconnected = False  # the watcher saw the client go, and cancelled us
        left = False  # the answer did not reach the client whole, whatever the reason
        completed = False

        async def watch() -> None:
            nonlocal disconnected
            while (await receive())["type"] != "http.disconnect":
                pass
            if streaming:
                disconnected = True
                task.cancel()

        async def send_or_leave(message: dict[str, object]) -> None:
            nonlocal left
            try:
                await send(message)
            except BaseException:
                left = True  # the client is gone (or the server stopping): nothing reached it
                raise

        watcher = asyncio.ensure_future(watch())
        try:
            await send_or_leave({"type": "http.response.start", "status": self.status_code,
                                 "headers": self.raw_headers})
            async for chunk in self.events:
                await send_or_leave({"type": "http.response.body", "body": chunk,
                                     "more_body": True})
            streaming = False
            await send_or_leave({"type": "http.response.body", "body": b"", "more_body": False})
            completed = True
        except asyncio.CancelledError:
            left = True
            if not disconnected:
                raise  # cancelled from outside (server shutdown): the answer is cut
            task.uncancel()  # the client left: nothing more to send, and not an error
        finally:
            streaming = False
            watcher.cancel()
            try:
                await self.events.aclose()
            finally:
                if not completed and not left:
                    self.recorder.stream_failed(500)  # the events raised: our bug, logged above
                # runs even when the events never started (the head could not be sent)
                await self._finish(abandoned=left and not completed)

    async def _finish(self, *, abandoned: bool) -> None:
        """Close the replies, then record (if not yet) and observe. A stream the client
        left before its end is aborted on its servers too."""
        call, recorder = self.call, self.recorder
        unfinished = abandoned and not recorder.recorded
        services = call.ctx.services
        services.inflight.leave(call)
        try:
            await call.close(streamed=True)
        finally:
            try:
                await recorder.finish(self.snapshot, unfinished=unfinished)
            finally:
                self.observer.observe(recorder.status)
                if unfinished:
                    for reply in call.replies:
                        await services.pool.abort(reply)
