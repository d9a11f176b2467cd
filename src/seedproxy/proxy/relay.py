"""The streaming response for SSE pass-through.

Starlette's ``StreamingResponse`` starts every stream in a new task inside an anyio
task group, which cost a quarter of a millisecond before the head went out. This
one sends the head at once from the handler's own task and forwards each chunk the
moment the iterator yields it. A small watcher task waits for the client's
disconnect and cancels the stream, so a client that leaves stops the upstream
call at once; the iterator is always closed, so its ``finally`` runs in this task,
and then ``StreamRecord.finish`` runs on every path (see ``stream.py``): a client
that left (a disconnect, a cancellation, or a ``send`` that raised, as servers and
middleware other than uvicorn may) makes the interaction abandoned.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from .stream import StreamRecord

__all__ = ["RelayResponse"]


class RelayResponse(Response):
    def __init__(
        self,
        events: AsyncIterator[bytes],
        record: StreamRecord,
        *,
        status_code: int,
        headers: Mapping[str, str],
        media_type: str,
    ) -> None:
        self.events = events
        self.record = record
        self.status_code = status_code
        self.media_type = media_type
        self.background = None
        self.init_headers(headers)
        record.adopt()  # last: nothing after this may fail before __call__ runs

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
                    self.record.status = 500  # the events raised: our bug, logged above us
                # runs even when the events never started (the head could not be sent)
                await self.record.finish(abandoned=left and not completed)
