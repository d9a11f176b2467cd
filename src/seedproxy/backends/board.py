"""The fleet board: the fleet's shared control state (paused, mode, abort epoch, the
weight version last set), one per fleet, whatever the number of proxy replicas.

Invariants:
- Every write returns the whole state after it, with ``seq`` one higher; ``board``
  names the board's lifetime (a Redis that lost its data starts a new one), so a
  reader keeps the newest state by ``(board, seq)`` and never goes back to an older one.
- ``abort_epoch`` only grows on one board: each pause in ``abort`` mode, and each
  weight-version change that aborts, adds one before any server is told.
- ``LocalBoard`` is one process's state (memory and SQLite stores), with no I/O.
  ``RedisBoard`` (``redis_board.py``) shares it between the replicas of a Redis store
  and publishes each write; ``follow`` applies what others write until cancelled.
- ``stop_session`` tells every replica (this one included) to stop a session's requests
  in flight; it is a message, not state: a replica that was not listening misses it,
  and those requests then end as they would have, finding no session to record in.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol

from .pause import PauseMode

if TYPE_CHECKING:
    from ..sessions import SessionStore

__all__ = ["FleetBoard", "FleetState", "LocalBoard", "open_board"]


@dataclass(frozen=True, slots=True)
class FleetState:
    paused: bool = False
    mode: PauseMode | None = None
    abort_epoch: int = 0
    weight_version: str | None = None
    """The version last set through ``/fleet/weight_version`` (None: never)."""
    seq: int = 0
    board: str | None = None

    def newer_than(self, other: FleetState) -> bool:
        return self.board != other.board or self.seq > other.seq


class FleetBoard(Protocol):
    async def read(self) -> FleetState: ...

    async def pause(self, mode: PauseMode) -> FleetState:
        """Paused in ``mode``; in ``abort`` mode the epoch moves too."""
        ...

    async def resume(self) -> FleetState: ...

    async def abort(self) -> FleetState:
        """Move the epoch: running requests are about to be aborted."""
        ...

    async def set_weight_version(self, version: str) -> FleetState: ...

    async def stop_session(self, session_id: str) -> None:
        """Tell every follower to stop ``session_id``'s requests in flight."""
        ...

    async def follow(self, apply: Callable[[FleetState], None],
                     stop: Callable[[str], None]) -> None:
        """Call ``apply`` with each state another writer makes, and ``stop`` with each
        session told to stop, until cancelled."""
        ...


class LocalBoard:
    """The state of one process: nobody else writes it, so there is nothing to follow."""

    def __init__(self) -> None:
        self._state = FleetState(board="local")

    def _write(self, **changes: object) -> FleetState:
        self._state = replace(self._state, seq=self._state.seq + 1, **changes)  # type: ignore[arg-type]
        return self._state

    async def read(self) -> FleetState:
        return self._state

    async def pause(self, mode: PauseMode) -> FleetState:
        epoch = self._state.abort_epoch + (mode == "abort")
        return self._write(paused=True, mode=mode, abort_epoch=epoch)

    async def resume(self) -> FleetState:
        return self._write(paused=False, mode=None)

    async def abort(self) -> FleetState:
        return self._write(abort_epoch=self._state.abort_epoch + 1)

    async def set_weight_version(self, version: str) -> FleetState:
        return self._write(weight_version=version)

    async def stop_session(self, session_id: str) -> None:
        return None

    async def follow(self, apply: Callable[[FleetState], None],
                     stop: Callable[[str], None]) -> None:
        return None


def open_board(store: SessionStore) -> FleetBoard:
    """The board replicas of ``store`` share: Redis for a Redis store, else local."""
    from ..sessions.store.redis import RedisStore

    if isinstance(store, RedisStore):
        from .redis_board import RedisBoard

        return RedisBoard(store)
    return LocalBoard()
