"""A non-streamed request whose client leaves before its answer (a closed connection,
an SDK timeout). Streams have their own watcher (``streaming.py``).

Invariants:
- The request runs in the handler's own task. One still running after
  ``WATCH_AFTER_S`` gets one watcher task reading the ASGI channel (the body was read
  whole, so the next message is ``http.disconnect``); one answered sooner costs a
  timer and nothing else, and is recorded as answered even if its client had left.
- A client that left has its request stopped and aborted upstream (``InFlight.stop``),
  and is recorded once, as abandoned (499): with the server's partial answer when it
  could be aborted, or without one when nothing could and no record had begun (the
  request is cancelled, closing the upstream connection) or when the request was
  waiting to be sent again (a failover, a resubmission held by a pause).
- Work that is no request's call (a replay verification) is cancelled when its client
  leaves (``stop_when_client_leaves``): nothing more is sent.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TYPE_CHECKING, TypeVar

from starlette.responses import Response
from starlette.types import Receive

from ..dialects import Captured
from ..errors import ClientClosed

if TYPE_CHECKING:
    from .call import UpstreamCall
    from .observer import Observer
    from .recorder import Recorder

__all__ = ["WATCH_AFTER_S", "client_left", "stop_when_client_leaves", "unless_client_leaves"]

WATCH_AFTER_S = 0.05

T = TypeVar("T")


async def client_left(receive: Receive) -> None:
    """Return once the ASGI channel says the client disconnected (any body still
    unread is read and dropped)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def unless_client_leaves(
    call: UpstreamCall, recorder: Recorder, observer: Observer, answer: Awaitable[Response],
    receive: Receive,
) -> Response:
    """Await a non-streamed ``answer`` while watching its client (see the module)."""
    handler = asyncio.current_task()
    assert handler is not None
    gone = ClientClosed("the client closed the connection before the answer was complete")
    cancelled = False  # the request was cancelled here (not by the server or the caller)
    watcher: asyncio.Task[None] | None = None

    async def watch() -> None:
        nonlocal cancelled
        await client_left(receive)
        recorder.abandon()
        aborted = await call.ctx.services.inflight.stop(call, gone)
        if not aborted and not recorder.recording and not handler.done():
            cancelled = True  # nothing to wait for; no record will be cut
            handler.cancel()

    def start() -> None:
        nonlocal watcher
        watcher = asyncio.get_running_loop().create_task(watch())

    timer = asyncio.get_running_loop().call_later(WATCH_AFTER_S, start)
    try:
        return await answer
    except asyncio.CancelledError:
        if not cancelled:
            raise  # the handler itself was cancelled
        handler.uncancel()
    except ClientClosed:  # a stopped dispatch refused to send another attempt
        pass
    finally:
        timer.cancel()
        if watcher is not None:
            watcher.cancel()
    if not recorder.recording:
        call.end()
        await recorder.record(gone.status_code, gone.body(), Captured())
    observer.observe(gone.status_code)
    return Response(status_code=gone.status_code)


async def stop_when_client_leaves(work: Awaitable[T], receive: Receive) -> T:
    """Await ``work`` in this task while watching its client; a client that leaves
    first cancels it, and ``ClientClosed`` is raised instead."""
    handler = asyncio.current_task()
    assert handler is not None
    left = False

    async def watch() -> None:
        nonlocal left
        await client_left(receive)
        left = True
        handler.cancel()

    watcher = asyncio.get_running_loop().create_task(watch())
    try:
        # no await between ``work``'s end and the watcher's cancel: it cannot fire after
        return await work
    except asyncio.CancelledError:
        if not left:
            raise  # the handler itself was cancelled
        handler.uncancel()
        raise ClientClosed("the client closed the connection before the answer was "
                           "complete") from None
    finally:
        watcher.cancel()
