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


class RedisLeases(RedisCore):
    _lease_script: Any
    _ack_script: Any  # both made by RedisStore

    def _lease_keys(self, batch_id: str, ids: builtins.list[str]) -> builtins.list[str]:
        return [self._k("b", batch_id), *(self._k("s", s) for s in ids),
                *(self._k("l", s) for s in ids)]

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
        refused = await self.run(
            self._lease_script(keys=self._lease_keys(batch_id, ids), args=args))
        return [ids[int(i) - 1] for i in refused]

    async def held_until(self, session_ids: builtins.list[str], now: float) -> dict[str, float]:
        if not session_ids:
            return {}
        values = await self.run(self.client.mget([self._k("l", s) for s in session_ids]))
        return {s: u for s, v in zip(session_ids, values, strict=True)
                if v is not None and (u := float(v.split(b"|", 1)[0])) > now}

    async def ack(self, batch_id: str, now: float) -> bool:
        raw = await self.run(self.client.get(self._k("b", batch_id)))
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
                                    self.changes_channel]
        keys = [*self._lease_keys(batch_id, ids),
                *(self._p + view for view in ("unexp", "ready", "ver"))]
        reply = await self.run(self._ack_script(keys=keys, args=args))
        if reply == -1:
            return False
        mine, ended = ([ids[int(i) - 1] for i in part] for part in reply)
        if batch.remove:
            for session_id in mine:
                await self.delete(session_id)
        else:
            for session_id in ended:
                await self._expire(session_id)
        return True
