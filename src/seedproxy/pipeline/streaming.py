"""A streamed answer: the one stream loop, and the response that sends it.

Starlette's ``StreamingResponse`` starts every stream in a new task inside an anyio
task group, which cost a quarter of a millisecond before the head went out. This
one sends the head at once from the handler's own task and forwards each chunk the
moment the loop yields it. A small watcher task waits for the client's disconnect
and cancels the stream, so a client that leaves stops the upstream call at once;
the loop is always closed, so its ``finally`` runs in this task, and then
``Exchange.finish_stream`` runs on every path: a client that left (a disconnect, a
cancellation, or a ``send`` that raised, as servers and middleware other than
uvicorn may) makes the interaction abandoned.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from ..dialects import Captured
from ..errors import UpstreamError
from .exchange import Exchange, Snapshot
from .presenters import Writer

if TYPE_CHECKING:
    from .readers import Reader

__all__ = ["StreamResponse", "stream_response"]

log = logging.getLogger("seedproxy.request")


def stream_response(ex: Exchange, reader: Reader, writer: Writer) -> StreamResponse:
    """The client's stream of ``reader``'s chunks, shown by ``writer``."""
    headers = ex.headers()
    headers["cache-control"] = "no-cache"

    def snapshot() -> tuple[Any, Captured]:
        return reader.recorded(writer.result()), reader.captured()

    return StreamResponse(_events(ex, reader, writer, snapshot), ex, snapshot, headers=headers)


async def _events(ex: Exchange, reader: Reader, writer: Writer,
                  snapshot: Snapshot) -> AsyncIterator[bytes]:
    """THE stream loop: each chunk shown as it arrives; recorded just before the
    terminator, so the client sees the end only once it is recorded. A failure ends the
    stream with the protocol's error event instead, and the record says its status
    (with the tokens so far); seedproxy's own bug is recorded as a 500 and raised."""
    try:
        async for chunk in reader.chunks(ex):
            for out in writer.feed(chunk):
                yield out
        closing = writer.finish()
        unrecorded = await ex.seal(snapshot)
        if unrecorded is not None:
            yield writer.error(unrecorded)
            return
        for out in closing:
            yield out
    except UpstreamError as exc:  # a broken stream, an error event, a malformed chunk
        log.warning("upstream %s failed mid-stream: %s", ex.upstream, exc.message)
        ex.stream_failed(exc.status_code)
        yield writer.error(exc)
    except Exception:
        ex.stream_failed(500)  # seedproxy's own bug: recorded as such, and raised
        raise


class StreamResponse(Response):
    def __init__(
        self, events: AsyncIterator[bytes], exchange: Exchange, snapshot: Snapshot, *,
        headers: Mapping[str, str],
    ) -> None:
        self.events = events
        self.exchange = exchange
        self.snapshot = snapshot
        self.status_code = 200
        self.media_type = "text/event-stream"
        self.background = None
        self.init_headers(headers)
        exchange.take_replies()  # last: nothing after this may fail before __call__ runs

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
            head = self.raw_headers
            await send_or_leave(
                {"type": "http.response.start", "status": self.status_code, "headers": head}
            )
            async for chunk in self.events:
                await send_or_leave(
                    {"type": "http.response.body", "body": chunk, "more_body": True}
                )
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
                aclose = getattr(self.events, "aclose", None)
                if aclose is not None:
                    await aclose()
            finally:
                if not completed and not left:
                    self.exchange.stream_failed(500)  # the events raised: our bug, logged above
                # runs even when the events never started (the head could not be sent)
                await self.exchange.finish_stream(self.snapshot,
                                                  abandoned=left and not completed)
