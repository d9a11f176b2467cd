"""The Redis store: sessions shared by several proxy replicas. ``redis://host:port/db``.

Invariants: every read-modify-write runs as one Lua script, so ``allocate`` (retry
digest reuse, pins and the counter) is atomic across replicas, and so are the
store-wide ``created``/``ended`` counters. Per session, keys are::

    {p}s:{id}   hash: ``rec`` (the record's fixed fields, JSON) + one field per mutable one
    {p}i:{id}   hash: interaction_id -> ``Interaction.to_storage()`` JSON
    {p}r:{id}   hash digest -> "index|interaction_id"; {p}rz:{id} zset digest by recency
    {p}p:{id}   hash: pinned index -> extra requests pinned to it

plus ``{p}all`` and ``{p}g:{group}`` (zsets by ``created_seq``), ``{p}open`` (set),
``{p}k:{sha256(api_key)}`` -> session id. ``?ended_ttl_s=N`` in the URL lets Redis
expire a session N seconds after it is both ended and exported (never before export:
dropping un-exported work is the evictor's job, which logs it).
"""

from __future__ import annotations

import builtins
import hashlib
import time
from typing import Any
from urllib.parse import parse_qs, urlsplit, urlunsplit

import orjson

from ...errors import ConfigError, SessionNotFound, StoreError
from ..interaction import Interaction
from ..record import SessionRecord, Slot
from .base import RETRY_MEMORY

__all__ = ["RedisStore"]

_MUTABLE = ("next_index", "last_active_at", "ended", "ended_seq", "reward", "exported")

# KEYS: s, r, rz, p ; ARGV: digest, retry, pinned ("" = none), memory, now
_ALLOCATE = """
if redis.call('EXISTS', KEYS[1]) == 0 then return {-1} end
local clock
if ARGV[2] == '1' then
  local kept = redis.call('HGET', KEYS[2], ARGV[1])
  if kept then
    clock = redis.call('HINCRBY', KEYS[1], 'rclock', 1)
    redis.call('ZADD', KEYS[3], clock, ARGV[1])
    return {1, kept}
  end
end
local slot
if ARGV[3] ~= '' then
  local extra = redis.call('HINCRBY', KEYS[4], ARGV[3], 1) - 1
  slot = ARGV[3] .. '|i' .. ARGV[3] .. '.p' .. extra
else
  local index = redis.call('HINCRBY', KEYS[1], 'next_index', 1) - 1
  slot = index .. '|i' .. index
end
redis.call('HSET', KEYS[1], 'last_active_at', ARGV[5])
redis.call('HSET', KEYS[2], ARGV[1], slot)
if not redis.call('ZSCORE', KEYS[3], ARGV[1]) then
  clock = redis.call('HINCRBY', KEYS[1], 'rclock', 1)
  redis.call('ZADD', KEYS[3], clock, ARGV[1])
end
if redis.call('ZCARD', KEYS[3]) > tonumber(ARGV[4]) then
  local oldest = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
  redis.call('ZREM', KEYS[3], oldest)
  redis.call('HDEL', KEYS[2], oldest)
end
return {0, slot}
"""

# KEYS: s, o ; ARGV: key, interaction id
_OCCURRENCE = """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
local known = redis.call('HGET', KEYS[2], 'i:' .. ARGV[2])
if known then return tonumber(known) end
local number = redis.call('HINCRBY', KEYS[2], 'k:' .. ARGV[1], 1) - 1
redis.call('HSET', KEYS[2], 'i:' .. ARGV[2], number)
return number
"""

# KEYS: s, all, open, key, created-counter, [group] ; ARGV: id, rec-json, now, has-group
_CREATE = """
if redis.call('EXISTS', KEYS[1]) == 1 then return -1 end
local seq = redis.call('INCR', KEYS[5]) - 1
redis.call('HSET', KEYS[1], 'rec', ARGV[2], 'next_index', 0, 'last_active_at', ARGV[3],
  'ended', 0, 'ended_seq', '', 'reward', '', 'exported', 0, 'created_seq', seq)
redis.call('ZADD', KEYS[2], seq, ARGV[1])
redis.call('SADD', KEYS[3], ARGV[1])
redis.call('SET', KEYS[4], ARGV[1])
if ARGV[4] == '1' then redis.call('ZADD', KEYS[6], seq, ARGV[1]) end
return seq
"""

# KEYS: s, open, ended-counter ; ARGV: id
_END = """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
if redis.call('HGET', KEYS[1], 'ended') == '0' then
  local seq = redis.call('INCR', KEYS[3]) - 1
  redis.call('HSET', KEYS[1], 'ended', 1, 'ended_seq', seq)
  redis.call('SREM', KEYS[2], ARGV[1])
end
return redis.call('HGET', KEYS[1], 'exported')
"""

# KEYS: s, i ; ARGV: interaction_id, data, now
_RECORD = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[1], 'last_active_at', ARGV[3])
return 1
"""


def _parse(url: str) -> tuple[str, str, float | None]:
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    prefix = query.pop("prefix", ["sp:"])[0]
    ttl_text = query.pop("ended_ttl_s", [None])[0]
    if query:
        raise ConfigError(f"unknown redis store option(s): {', '.join(sorted(query))}")
    try:
        ttl = float(ttl_text) if ttl_text is not None else None
    except ValueError:
        raise ConfigError(f"ended_ttl_s must be a number, got {ttl_text!r}") from None
    if ttl is not None and ttl <= 0:
        raise ConfigError("ended_ttl_s must be positive")
    return urlunsplit(parts._replace(query="")), prefix, ttl


class RedisStore:
    """``SessionStore`` on Redis, shared by every replica pointed at the same database."""

    def __init__(self, url: str, *, retry_memory: int = RETRY_MEMORY) -> None:
        try:
            import redis.asyncio as aioredis
            from redis.exceptions import RedisError
        except ImportError as exc:
            raise ConfigError(
                "the Redis store needs the redis package: pip install 'seedproxy[redis]'"
            ) from exc
        base, self._p, self._ended_ttl = _parse(url)
        self._errors: tuple[type[BaseException], ...] = (RedisError, OSError)
        self._redis: Any = aioredis.Redis.from_url(base)
        self._retry_memory = retry_memory
        self._allocate = self._redis.register_script(_ALLOCATE)
        self._create = self._redis.register_script(_CREATE)
        self._end = self._redis.register_script(_END)
        self._record = self._redis.register_script(_RECORD)
        self._occurrence = self._redis.register_script(_OCCURRENCE)

    def _k(self, kind: str, session_id: str) -> str:
        return f"{self._p}{kind}:{session_id}"

    def _session_keys(self, session_id: str) -> builtins.list[str]:
        return [self._k(kind, session_id) for kind in ("s", "i", "r", "rz", "p", "o")]

    def _key_of(self, api_key: str) -> str:
        return self._p + "k:" + hashlib.sha256(api_key.encode()).hexdigest()

    async def _call(self, awaitable: Any) -> Any:
        try:
            return await awaitable
        except self._errors as exc:
            raise StoreError(f"Redis store failed: {type(exc).__name__}: {exc}") from exc

    @staticmethod
    def _decode(raw: dict[bytes, bytes]) -> SessionRecord | None:
        if not raw or b"rec" not in raw:
            return None
        data = orjson.loads(raw[b"rec"])
        data["created_seq"] = int(raw[b"created_seq"])
        data["next_index"] = int(raw[b"next_index"])
        data["last_active_at"] = float(raw[b"last_active_at"])
        data["ended"] = raw[b"ended"] == b"1"
        data["ended_seq"] = int(raw[b"ended_seq"]) if raw[b"ended_seq"] else None
        data["reward"] = float(raw[b"reward"]) if raw[b"reward"] else None
        data["exported"] = raw[b"exported"] == b"1"
        return SessionRecord.from_dict(data)

    async def create(self, record: SessionRecord) -> bool:
        now = time.time()
        fixed = {k: v for k, v in record.to_dict().items() if k not in _MUTABLE}
        fixed["created_at"] = now
        keys = [
            self._k("s", record.session_id),
            self._p + "all",
            self._p + "open",
            self._key_of(record.api_key),
            self._p + "seq:created",
        ]
        if record.group_id is not None:
            keys.append(self._k("g", record.group_id))
        args: builtins.list[bytes | str] = [
            record.session_id, orjson.dumps(fixed), repr(now), "1" if record.group_id else "0"
        ]
        seq = await self._call(self._create(keys=keys, args=args))
        if int(seq) < 0:
            return False
        record.created_seq = int(seq)
        record.created_at = record.last_active_at = now
        return True

    async def get(self, session_id: str) -> SessionRecord | None:
        return self._decode(await self._call(self._redis.hgetall(self._k("s", session_id))))

    async def find_by_key(self, api_key: str) -> SessionRecord | None:
        session_id = await self._call(self._redis.get(self._key_of(api_key)))
        if session_id is None:
            return None
        record = await self.get(session_id.decode())
        return record if record is not None and record.api_key == api_key else None

    async def list(self, group_id: str | None = None) -> builtins.list[SessionRecord]:
        index = self._p + "all" if group_id is None else self._k("g", group_id)
        ids = await self._call(self._redis.zrange(index, 0, -1))
        if not ids:
            return []
        pipe = self._redis.pipeline(transaction=False)
        for raw_id in ids:
            pipe.hgetall(self._k("s", raw_id.decode()))
        rows = await self._call(pipe.execute())
        records = [self._decode(row) for row in rows]
        gone = [raw_id for raw_id, r in zip(ids, records, strict=True) if r is None]
        if gone:  # expired sessions leave their index entries behind
            await self._call(self._redis.zrem(index, *gone))
        return [r for r in records if r is not None]

    async def allocate(
        self, session_id: str, *, digest: bytes, retry: bool, pinned: int | None
    ) -> Slot:
        keys = [self._k(kind, session_id) for kind in ("s", "r", "rz", "p")]
        args: builtins.list[bytes | str | int] = [
            digest,
            "1" if retry else "0",
            "" if pinned is None else str(pinned),
            self._retry_memory,
            repr(time.time()),
        ]
        reply = await self._call(self._allocate(keys=keys, args=args))
        if int(reply[0]) < 0:
            raise SessionNotFound(f"session {session_id!r} not found")
        index, _, interaction_id = reply[1].decode().partition("|")
        return Slot(int(index), interaction_id, reused=int(reply[0]) == 1)

    async def occurrence(self, session_id: str, key: str, interaction_id: str) -> int:
        keys = [self._k("s", session_id), self._k("o", session_id)]
        number = int(await self._call(self._occurrence(keys=keys, args=[key, interaction_id])))
        if number < 0:
            raise SessionNotFound(f"session {session_id!r} not found")
        return number

    async def record(self, session_id: str, interaction: Interaction) -> None:
        keys = [self._k("s", session_id), self._k("i", session_id)]
        data = orjson.dumps(interaction.to_storage())
        args: builtins.list[bytes | str] = [interaction.interaction_id, data, repr(time.time())]
        if not int(await self._call(self._record(keys=keys, args=args))):
            raise SessionNotFound(f"session {session_id!r} not found")

    async def _raw_interactions(self, session_id: str) -> builtins.list[Interaction]:
        pipe = self._redis.pipeline(transaction=True)
        pipe.exists(self._k("s", session_id))
        pipe.hvals(self._k("i", session_id))
        exists, values = await self._call(pipe.execute())
        if not exists:
            raise SessionNotFound(f"session {session_id!r} not found")
        items = [Interaction.from_storage(orjson.loads(v)) for v in values]
        return sorted(items, key=lambda i: (i.request_index, i.interaction_id))

    async def interactions(self, session_id: str) -> builtins.list[Interaction]:
        return await self._raw_interactions(session_id)

    async def set_reward(
        self, session_id: str, reward: float, interaction_id: str | None
    ) -> str | None:
        items = await self._raw_interactions(session_id)
        if interaction_id is None:
            target = items[-1] if items else None
        else:
            target = next((i for i in items if i.interaction_id == interaction_id), None)
            if target is None:
                raise SessionNotFound(f"interaction {interaction_id!r} not found in {session_id!r}")
        pipe = self._redis.pipeline(transaction=True)
        pipe.hset(self._k("s", session_id), "reward", repr(float(reward)))
        if target is not None:
            target.reward = reward
            pipe.hset(
                self._k("i", session_id),
                target.interaction_id,
                orjson.dumps(target.to_storage()),
            )
        await self._call(pipe.execute())
        return target.interaction_id if target is not None else None

    async def end(self, session_id: str) -> SessionRecord:
        keys = [self._k("s", session_id), self._p + "open", self._p + "seq:ended"]
        exported = await self._call(self._end(keys=keys, args=[session_id]))
        if exported == -1:
            raise SessionNotFound(f"session {session_id!r} not found")
        if exported == b"1":
            await self._expire(session_id)
        record = await self.get(session_id)
        if record is None:
            raise SessionNotFound(f"session {session_id!r} not found")
        return record

    async def _expire(self, session_id: str) -> None:
        if self._ended_ttl is None:
            return
        ttl_ms = int(self._ended_ttl * 1000)
        record = await self.get(session_id)
        pipe = self._redis.pipeline(transaction=False)
        for key in self._session_keys(session_id):
            pipe.pexpire(key, ttl_ms)
        if record is not None:
            pipe.pexpire(self._key_of(record.api_key), ttl_ms)
        await self._call(pipe.execute())

    async def mark_exported(self, session_ids: builtins.list[str]) -> None:
        for session_id in session_ids:
            key = self._k("s", session_id)
            pipe = self._redis.pipeline(transaction=True)
            pipe.exists(key)
            pipe.hget(key, "ended")
            exists, ended = await self._call(pipe.execute())
            if not exists:
                continue
            await self._call(self._redis.hset(key, "exported", 1))
            if ended == b"1":
                await self._expire(session_id)

    async def delete(self, session_id: str) -> bool:
        record = await self.get(session_id)
        if record is None:
            return False
        pipe = self._redis.pipeline(transaction=True)
        pipe.delete(*self._session_keys(session_id))
        pipe.delete(self._key_of(record.api_key))
        pipe.zrem(self._p + "all", session_id)
        pipe.srem(self._p + "open", session_id)
        if record.group_id is not None:
            pipe.zrem(self._k("g", record.group_id), session_id)
        await self._call(pipe.execute())
        return True

    async def count_open(self) -> int:
        return int(await self._call(self._redis.scard(self._p + "open")))

    async def close(self) -> None:
        await self._redis.aclose()
