"""The fleet board on the Redis store: one hash, ``{p}fleet``, and a pub/sub channel of
the same name, on the store's connection and under its key prefix; membership changes
are fields of the hash (``member:<url>``: 1 added at run time, 0 removed).

Invariants:
- Every write is one Lua script (the store's deadline guard included): it changes the
  hash, adds one to ``seq``, and publishes the whole hash, so replicas receive states
  in the order Redis made them.
- ``follow`` reads the whole hash each time its subscription is (re)made, so a state
  published while a replica was not listening is never lost to it. Sessions to stop go
  on ``{p}fleet:stop`` (one session id per message).
- The weight-sync lock is one key, ``{p}fleet:sync``, set with NX and an expiry to
  ``{token, what}``; only the token that set it deletes it (one Lua script).
- An outage never ends ``follow``: it logs, waits (0.1 s doubling to 5 s) and
  subscribes again, keeping the last state it knew. A write or a read during an outage
  is a ``StoreError`` (503), never a hang past the store's timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable
from typing import Any

import orjson

from ..errors import BadRequest, StoreError
from ..sessions.ids import check_id
from ..sessions.store.redis import RedisStore
from .state import PAUSE_MODES, FleetState, PauseMode

__all__ = ["RedisBoard"]

log = logging.getLogger("seedproxy.fleet")

_MEMBER = "member:"
_MIN_BACKOFF_S = 0.1
_MAX_BACKOFF_S = 5.0

# KEYS: the state hash ; ARGV: channel, board id, '1' to move the epoch, then field and
# value pairs to set (the guard appends a deadline)
_WRITE = """
redis.call('HSETNX', KEYS[1], 'board', ARGV[2])
if ARGV[3] == '1' then redis.call('HINCRBY', KEYS[1], 'epoch', 1) end
for i = 4, #ARGV - 2, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
redis.call('HINCRBY', KEYS[1], 'seq', 1)
local state = redis.call('HGETALL', KEYS[1])
redis.call('PUBLISH', ARGV[1], cjson.encode(state))
return state
"""

# KEYS: the sync lock ; ARGV: the value that took it (the guard adds a deadline)
_END_SYNC = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class RedisBoard:
    """``FleetBoard`` shared by every replica of one Redis store."""

    def __init__(self, store: RedisStore) -> None:
        self._store = store
        self._key = store.key_prefix + "fleet"
        self._channel = self._key
        self._stops = self._key + ":stop"
        self._id = uuid.uuid4().hex  # the board's lifetime, if this replica writes it first
        self._write = store.script(_WRITE)
        self._sync_key = self._key + ":sync"
        self._end_sync = store.script(_END_SYNC)
        self._sync_values: dict[str, bytes] = {}  # this replica's syncs: token -> lock value

    async def read(self) -> FleetState:
        raw = await self._store.run(self._store.client.hgetall(self._key))
        return _state({k.decode(): v.decode() for k, v in raw.items()})

    async def _op(self, *fields: str, abort: bool = False) -> FleetState:
        args = [self._channel, self._id, "1" if abort else "0", *fields]
        reply = await self._store.run(self._write(keys=[self._key], args=args))
        flat = [item.decode() for item in reply]
        return _state(dict(zip(flat[::2], flat[1::2], strict=True)))

    async def pause(self, mode: PauseMode) -> FleetState:
        return await self._op("paused", "1", "mode", mode, abort=mode == "abort")

    async def resume(self) -> FleetState:
        return await self._op("paused", "0", "mode", "")

    async def abort(self) -> FleetState:
        return await self._op(abort=True)

    async def set_weight_version(self, version: str) -> FleetState:
        return await self._op("version", version)

    async def set_member(self, url: str, active: bool) -> FleetState:
        return await self._op(_MEMBER + url, "1" if active else "0")

    async def begin_sync(self, token: str, what: str, ttl_s: float) -> str | None:
        value = orjson.dumps({"token": token, "what": what})
        client = self._store.client
        taken = await self._store.run(
            client.set(self._sync_key, value, nx=True, px=max(1, int(ttl_s * 1000))))
        if taken:
            self._sync_values[token] = value
            return None
        holder = await self._store.run(client.get(self._sync_key))
        try:
            return str(orjson.loads(holder)["what"])
        except (orjson.JSONDecodeError, TypeError, KeyError):
            return "another weight sync"  # it ended or expired meanwhile, or is not ours

    async def end_sync(self, token: str) -> None:
        value = self._sync_values.pop(token, None)
        if value is not None:
            await self._store.run(self._end_sync(keys=[self._sync_key], args=[value]))

    async def stop_session(self, session_id: str) -> None:
        await self._store.run(self._store.client.publish(self._stops, session_id))

    async def follow(self, apply: Callable[[FleetState], None],
                     stop: Callable[[str], None]) -> None:
        delay = _MIN_BACKOFF_S
        errors: tuple[type[BaseException], ...] = (*self._store.errors, StoreError)
        stops = self._stops.encode()
        while True:
            pubsub = self._store.client.pubsub()
            try:
                await pubsub.subscribe(self._channel, self._stops)
                while True:
                    message = await pubsub.get_message(timeout=None)
                    if message is None:
                        continue
                    if message["type"] == "subscribe":  # (re)subscribed: catch up
                        apply(await self.read())
                        delay = _MIN_BACKOFF_S
                    elif message["type"] == "message" and message["channel"] == stops:
                        session_id = _session_id(message["data"])
                        if session_id is not None:
                            stop(session_id)
                    elif message["type"] == "message":
                        state = _published(message["data"])
                        if state is not None:
                            apply(state)
            except errors as exc:
                log.warning("fleet board unreachable (%s: %s); keeping the last state, "
                            "retrying in %gs", type(exc).__name__, exc, delay)
            finally:
                with contextlib.suppress(*self._store.errors):
                    await pubsub.aclose()
            await asyncio.sleep(delay)
            delay = min(delay * 2, _MAX_BACKOFF_S)


def _session_id(data: Any) -> str | None:
    """A published session id, or None (logged) when it is not one."""
    try:
        return check_id(data.decode("utf-8"), param="session_id")
    except (UnicodeDecodeError, BadRequest) as exc:
        log.warning("ignored a malformed session-stop message: %s", exc)
        return None


def _published(data: Any) -> FleetState | None:
    """A published state, or None (logged) when it is not one of ours."""
    try:
        flat = orjson.loads(data)
        if not isinstance(flat, list) or not all(isinstance(x, str) for x in flat):
            raise ValueError("not a list of strings")
        return _state(dict(zip(flat[::2], flat[1::2], strict=True)))
    except (ValueError, StoreError) as exc:
        log.warning("ignored a malformed fleet board message: %s", exc)
        return None


def _state(fields: dict[str, str]) -> FleetState:
    """The state a board hash holds (an empty hash: nothing was ever written)."""
    if not fields:
        return FleetState()
    mode = fields.get("mode") or None
    paused = fields.get("paused", "0")
    try:
        epoch, seq = int(fields.get("epoch", "0")), int(fields.get("seq", "0"))
    except ValueError:
        epoch = seq = -1
    if paused not in ("0", "1") or mode not in (None, *PAUSE_MODES) or min(epoch, seq) < 0:
        raise StoreError(f"the fleet board holds a state seedproxy did not write: {fields!r}"[:300])
    members = tuple(sorted(
        (name.removeprefix(_MEMBER), value == "1")
        for name, value in fields.items() if name.startswith(_MEMBER)
    ))
    if any(fields[_MEMBER + url] not in ("0", "1") for url, _ in members):
        raise StoreError(
            f"the fleet board holds a member seedproxy did not write: {fields!r}"[:300])
    return FleetState(paused=paused == "1", mode=mode, abort_epoch=epoch,
                      weight_version=fields.get("version"), members=members, seq=seq,
                      board=fields.get("board"))
