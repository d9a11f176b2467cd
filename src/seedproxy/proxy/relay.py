"""The streaming response for SSE pass-through.

Starlette's ``StreamingResponse`` starts every stream in a new task inside an anyio
task group, which cost a quarter of a millisecond before the head went out. This
one sends the head at once from the handler's own task and forwards each chunk the
moment the iterator yields it. A small watcher task waits for the client's
disconnect and cancels the stream, so a client that leaves stops the upstream
call at once; the iterator is always closed, so its ``finally`` runs in this task.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

__all__ = ["RelayResponse"]


class RelayResponse(Response):
    def __init__(
        self,
        events: AsyncIterator[bytes],
        *,
        status_code: int,
        headers: Mapping[str, str],
        media_type: str,
        on_close: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.events = events
        self.on_close = on_close
        self.status_code = status_code
        self.media_type = media_type
        self.background = None
        self.init_headers(headers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        task = asyncio.current_task()
        assert task is not None
        streaming = True
        left = False

        async def watch() -> None:
            nonlocal left
            while (await receive())["type"] != "http.disconnect":
                pass
            if streaming:
                left = True
                task.cancel()

        watcher = asyncio.ensure_future(watch())
        try:
            await send(
                {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
            )
            async for chunk in self.events:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            streaming = False
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except asyncio.CancelledError:
            if not left:
                raise
            task.uncancel()  # the client left: nothing more to send, and not an error
        finally:
            streaming = False
            watcher.cancel()
            aclose = getattr(self.events, "aclose", None)
            if aclose is not None:
                await aclose()
            if self.on_close is not None:  # runs even when the iterator never started
                await self.on_close()
