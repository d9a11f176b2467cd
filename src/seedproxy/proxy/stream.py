"""Who closes upstream answers, and how a streamed interaction is recorded: one
mechanism for every stream (single, fan-out, Responses).

- ``UpstreamReplies``: every upstream answer a request opens is added here the
  moment it exists. ``Forwarder.forward`` closes them all in its ``finally`` (error,
  cancellation, a bug between open and close), unless a stream response took them.
- ``StreamRecord``: a stream response, once built, takes the replies (``adopt``). Its events call
  ``commit()`` just before their terminal event (``[DONE]``, ``response.completed``),
  so the client sees the end only once it is recorded; ``RelayResponse`` calls
  ``finish()`` in its ``finally``, on every path (even when sending the head failed
  and the events never ran): the replies are closed, and an interaction not yet
  recorded is recorded now, as abandoned when the client left.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..backends import Captured
from ..backends.pool import UpstreamReply
from ..errors import SessionNotFound, StoreError

if TYPE_CHECKING:
    from .forward import Forwarder, Plan

__all__ = ["CLIENT_CLOSED", "StreamRecord", "UpstreamReplies", "close_all"]

log = logging.getLogger("seedproxy.request")

CLIENT_CLOSED = 499
"""Status recorded for an answer whose client left before it was complete (nginx's code)."""


class UpstreamReplies:
    """The upstream answers one request opened; each is closed exactly once."""

    __slots__ = ("_replies", "taken")

    def __init__(self) -> None:
        self._replies: list[UpstreamReply] = []
        self.taken = False
        """Set when a stream response took the replies: closing them is its job now."""

    def add(self, reply: UpstreamReply) -> UpstreamReply:
        self._replies.append(reply)
        return reply

    def take(self) -> list[UpstreamReply]:
        self.taken = True
        return list(self._replies)

    async def close(self) -> None:
        """Close every reply, even when closing one raises."""
        replies, self._replies = self._replies, []
        await close_all(replies)


async def close_all(replies: list[UpstreamReply]) -> None:
    """``aclose`` each reply (idempotent); a failure does not skip the rest."""
    if not replies:
        return
    try:
        await replies[0].aclose()
    finally:
        await close_all(replies[1:])


Snapshot = Callable[[], tuple[Any, Captured]]
"""Returns (the recorded response, the captured tokens) of a stream so far."""


class StreamRecord:
    """Records one streamed interaction exactly once, closes its replies, observes it."""

    def __init__(self, fwd: Forwarder, plan: Plan, snapshot: Snapshot) -> None:
        self._fwd = fwd
        self._plan = plan
        self._replies: list[UpstreamReply] = []
        self.snapshot = snapshot
        """What the record holds when it is made (a stream may change it once it knows)."""
        self._recorded = False
        self.status = 200
        """What the record says; the events set it when the upstream fails mid-stream."""

    def adopt(self) -> None:
        """Take the plan's replies: called by the response as the last step of its
        construction, so that from then on its ``__call__`` is what closes them."""
        self._replies = self._plan.replies.take()

    async def commit(self, *, abandoned: bool = False) -> None:
        """Record the interaction now, unless it already is."""
        if self._recorded:
            return
        self._recorded = True
        if abandoned:
            self.status = CLIENT_CLOSED
        if self._plan.capture:
            response, captured = self.snapshot()
            await self._fwd.record(self._plan, self.status, response, captured, abandoned=abandoned)

    async def seal(self) -> StoreError | SessionNotFound | None:
        """Record before the terminal event. A store that fails, or a session deleted
        meanwhile, is told to the client as the error (returned, for the stream to send
        instead of its end); the interaction is then never recorded later as a success."""
        try:
            await self.commit()
        except (StoreError, SessionNotFound) as exc:
            log.warning("stream not recorded: %s", exc.message)
            self.status = exc.status_code
            return exc
        return None

    async def finish(self, *, abandoned: bool) -> None:
        """The stream is over: close the replies, then record (if not yet) and observe.
        A stream the client left before its end is also aborted on its servers, so the
        GPU stops working on it."""
        unfinished = abandoned and not self._recorded
        self._fwd.inflight.leave(self._plan)
        try:
            await close_all(self._replies)
        finally:
            try:
                await self.commit(abandoned=abandoned)
            except SessionNotFound:  # deleted while it ran: there is nothing to record into
                log.info("stream of a deleted session not recorded")
            self._fwd.observe(self._plan, self.status)
            if unfinished:
                for reply in self._replies:
                    await self._fwd.pool.abort(reply)
