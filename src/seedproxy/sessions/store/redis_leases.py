"""Export leases in Redis (see ``leases.py`` for the rules), shared by every replica.

Keys: ``{p}l:{id}`` (a session's latest lease: ``"{until}|{batch_id}"``, dropped with
the session's other keys) and ``{p}b:{batch_id}`` (the batch as JSON, expiring
``BATCH_KEEP_S`` past its lease or its ack). Leasing is one Lua script over every
session of the batch: it checks each (same ``created_seq``, no live lease, not exported)
and leases all or none, so two replicas exporting at once never both get a session.
An ack is one script too: it marks the batch's sessions exported and releases their
lease together, so no export can see an acknowledged session as free.
"""

from __future__ import annotations

import builtins
from typing import Any

import orjson

from ..record import SessionRecord
from .leases import BATCH_KEEP_S, Batch
from .redis_core import RedisCore

__all__ = ["RedisLeases"]

# KEYS: batch, s_1..s_n, l_1..l_n ; ARGV: batch_id, now, until, named, keep_ms,
# batch json, seq_1..seq_n. Returns the (1-based) positions refused; {} = leased.
_LEASE = """
local n = (#KEYS - 1) / 2
local refused = {}
for i = 1, n do
  local s, l = KEYS[1 + i], KEYS[1 + n + i]
  local bad = redis.call('HGET', s, 'created_seq') ~= ARGV[6 + i]
  if not bad then
    local held = redis.call('GET', l)
    if held and tonumber(string.match(held, '^([^|]*)|')) > tonumber(ARGV[2]) then bad = true end
  end
  if not bad and ARGV[4] == '0' and redis.call('HGET', s, 'exported') == '1' then bad = true end
  if bad then refused[#refused + 1] = i end
end
if #refused > 0 then return refused end
local value = ARGV[3] .. '|' .. ARGV[1]
for i = 1, n do redis.call('SET', KEYS[1 + n + i], value) end
redis.call('SET', KEYS[1], ARGV[6], 'PX', ARGV[5])
return {}
"""

# KEYS: batch, s_1..s_n, l_1..l_n, unexp, ready, ver ; ARGV: batch_id, keep_ms,
# acked batch json, seq_1..seq_n, id_1..id_n, channel. Returns -1 for a forgotten batch,
# else {positions still this batch's sessions, positions of those that have ended}.
_ACK = """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
local n = (#KEYS - 4) / 2
local unexp, ready, ver = KEYS[#KEYS - 2], KEYS[#KEYS - 1], KEYS[#KEYS]
local mine, ended = {}, {}
for i = 1, n do
  local s, l = KEYS[1 + i], KEYS[1 + n + i]
  if redis.call('HGET', s, 'created_seq') == ARGV[3 + i] then
    local held = redis.call('GET', l)
    if held and string.match(held, '^[^|]*|(.*)$') == ARGV[1] then redis.call('DEL', l) end
    redis.call('HSET', s, 'exported', 1)
    redis.call('ZREM', unexp, ARGV[3 + n + i])
    redis.call('ZREM', ready, ARGV[3 + n + i])
    mine[#mine + 1] = i
    if redis.call('HGET', s, 'ended') == '1' then ended[#ended + 1] = i end
  end
end
if #mine > 0 then
  redis.call('INCR', ver)
  redis.call('PUBLISH', ARGV[#ARGV - 1], 'exported')
end
redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[2])
return {mine, ended}
"""


class RedisLeases:
    """The leases of a Redis store (``redis_core.py``), over its connection, keys and scripts."""

    def __init__(self, store: RedisCore) -> None:
        self._store = store
        self._lease_script = store.script(_LEASE)
        self._ack_script = store.script(_ACK)

    def _lease_keys(self, batch_id: str, ids: builtins.list[str]) -> builtins.list[str]:
        return [self._store._k("b", batch_id), *(self._store._k("s", s) for s in ids),
                *(self._store._k("l", s) for s in ids)]

    async def lease(
        self, batch_id: str, records: builtins.list[SessionRecord], *,
        now: float, until: float, remove: bool, named: bool,
    ) -> builtins.list[str]:
        ids = [r.session_id for r in records]
        batch = Batch([(r.session_id, r.created_seq) for r in records], remove, until)
        keep_ms = max(1, int((until - now + BATCH_KEEP_S) * 1000))
        args: builtins.list[Any] = [batch_id, repr(now), repr(until), "1" if named else "0",
                                    keep_ms, orjson.dumps(batch),
                                    *(str(r.created_seq) for r in records)]
        refused = await self._store._call(
            self._lease_script(keys=self._lease_keys(batch_id, ids), args=args))
        return [ids[int(i) - 1] for i in refused]

    async def held_until(self, session_ids: builtins.list[str], now: float) -> dict[str, float]:
        if not session_ids:
            return {}
        store = self._store
        values = await store._call(store._redis.mget([store._k("l", s) for s in session_ids]))
        until = {s: float(v.split(b"|", 1)[0]) for s, v in zip(session_ids, values, strict=True)
                 if v is not None}
        return {s: u for s, u in until.items() if u > now}

    async def ack(self, batch_id: str, now: float) -> bool:
        raw = await self._store._call(self._store._redis.get(self._store._k("b", batch_id)))
        if raw is None:
            return False
        batch = Batch.from_json(orjson.loads(raw))
        if now >= batch.until + BATCH_KEEP_S:
            return False  # forgotten, as in every store (Redis's own TTL may lag)
        if not batch.acked:
            batch.acked, batch.until = True, min(batch.until, now)
        ids = [s for s, _ in batch.sessions]
        args: builtins.list[Any] = [batch_id, int(BATCH_KEEP_S * 1000),
                                    orjson.dumps(batch),
                                    *(str(seq) for _, seq in batch.sessions), *ids,
                                    self._store.changes_channel]
        keys = [*self._lease_keys(batch_id, ids),
                *(self._store._p + view for view in ("unexp", "ready", "ver"))]
        reply = await self._store._call(self._ack_script(keys=keys, args=args))
        if reply == -1:
            return False
        mine, ended = ([ids[int(i) - 1] for i in part] for part in reply)
        if batch.remove:
            for session_id in mine:
                await self._store.delete(session_id)
        else:
            for session_id in ended:
                await self._store._expire(session_id)
        return True
