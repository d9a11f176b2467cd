"""The fleet board: the fleet's shared control state (``state.FleetState``), one per
fleet, whatever the number of proxy replicas.

Invariants:
- Every write returns the whole state after it, with ``seq`` one higher; ``board``
  names the board's lifetime (a Redis that lost its data starts a new one), so a
  reader keeps the newest state by ``(board, seq)`` and never goes back to an older one.
- ``abort_epoch`` only grows on one board: each pause in ``abort`` mode, and each
  weight-version change that aborts, adds one before any server is told.
- ``LocalBoard`` is one process's state (memory and SQLite stores), with no I/O;
  ``RedisBoard`` shares it between the replicas of a Redis store.
- The weight-sync lock admits one ``/fleet/update_weights`` at a time per fleet: the
  local board's is claimed with no await between the check and the claim (atomic on the
  event loop); the Redis board's expires, so a replica that died mid-sync frees it.
- ``stop_session`` is a message, not state: a replica that was not listening misses it,
  and those requests then end as they would have, finding no session to record in.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from .state import FleetBoard, FleetState, PauseMode

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..sessions import SessionStore

__all__ = ["FleetBoard", "FleetState", "LocalBoard", "open_board"]


class LocalBoard:
    """The state of one process: nobody else writes it, so there is nothing to follow."""

    def __init__(self) -> None:
        self._state = FleetState(board="local")
        self._sync: tuple[str, str] | None = None  # (token, what) of the sync in progress

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

    async def set_member(self, url: str, active: bool) -> FleetState:
        members = dict(self._state.members) | {url: active}
        return self._write(members=tuple(sorted(members.items())))

    async def begin_sync(self, token: str, what: str, ttl_s: float) -> str | None:
        if self._sync is not None:
            return self._sync[1]
        self._sync = (token, what)
        return None

    async def end_sync(self, token: str) -> None:
        if self._sync is not None and self._sync[0] == token:
            self._sync = None

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
