"""The requests in flight, by session, and how they are stopped: by
``DELETE /sessions/{id}``, or because a non-streamed request's client left.

Invariants:
- A call with a session is registered exactly as long as its upstream replies are
  open (``admission.run``; a stream until its response ends).
- Stopping a call stops each of its ``Dispatch``es (no further attempt, failover or
  resubmission is sent) and asks each server holding one to abort it (SGLang's
  ``/abort_request``); the server's partial answer is recorded as any answer is.
- The registry is per proxy process; ``delete_session`` also tells the other replicas
  of a shared board, each of which stops its own (``stop_soon``, in a task of its own
  so that the board's follower never waits).
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from ..errors import SeedProxyError, SessionNotFound
from ..fleet.board import FleetBoard
from ..fleet.pool import UpstreamPool
from ..fleet.upstream import Dispatch

__all__ = ["InFlight"]


class Call(Protocol):
    """What the registry reads of ``call.UpstreamCall``."""

    @property
    def session_id(self) -> str | None: ...

    @property
    def dispatches(self) -> list[Dispatch]: ...


class InFlight:
    """The upstream calls in flight in this process, by session id."""

    def __init__(self, pool: UpstreamPool, board: FleetBoard) -> None:
        self.pool = pool
        self.board = board
        self._by_session: dict[str, dict[int, Call]] = {}
        self._stopping: set[asyncio.Task[int]] = set()

    def enter(self, call: Call) -> None:
        if call.session_id is not None:
            self._by_session.setdefault(call.session_id, {})[id(call)] = call

    def leave(self, call: Call) -> None:
        if call.session_id is None:
            return
        calls = self._by_session.get(call.session_id)
        if calls is not None:
            calls.pop(id(call), None)
            if not calls:
                del self._by_session[call.session_id]

    async def stop(self, call: Call, why: SeedProxyError) -> bool:
        """Stop ``call``'s dispatches and abort them on their servers. Returns whether
        any could be aborted (a server and a ``rid`` were known)."""
        for dispatch in call.dispatches:
            dispatch.stop(why)
        named = [d for d in call.dispatches if d.rid is not None and d.upstream is not None]
        await asyncio.gather(*(self.pool.abort(d) for d in named))
        return bool(named)

    async def stop_session(self, session_id: str) -> int:
        """Stop every call of ``session_id`` here; returns how many there were."""
        why = SessionNotFound(f"session {session_id!r} was deleted while this request ran")
        calls = list(self._by_session.get(session_id, {}).values())
        await asyncio.gather(*(self.stop(call, why) for call in calls))
        return len(calls)

    async def delete_session(self, session_id: str) -> None:
        """Stop the session's requests here, then tell every other replica."""
        await self.stop_session(session_id)
        await self.board.stop_session(session_id)

    def stop_soon(self, session_id: str) -> None:
        """``stop_session`` in a task of its own (for the board's follower)."""
        task = asyncio.get_running_loop().create_task(self.stop_session(session_id))
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)
