"""The Redis store's indexes (``base.View``), expiry order and change feed.

Keys, beside ``{p}all`` and ``{p}g:{group}``: ``{p}id:{identity}`` (zset by
``created_seq``), ``{p}unexp`` (zset by ``created_seq``: not exported), ``{p}ready``
(zset by ``ended_seq``: ended, not exported), ``{p}active`` (zset by last activity,
wall-clock seconds: the TTL sweep's order) and ``{p}ver`` (the change counter). The
store's scripts keep them in the same script that changes a session, so every
replica reads the same indexes. A script that can change an export's choice (a
session created, ended, exported or deleted) publishes on channel ``{p}changes``: a
waiting export on any replica is woken by it. ``check_s`` is a backstop for a message
lost with a broken connection: the export reads ``{p}ver`` that often.

Sessions that Redis expired (``ended_ttl_s``) leave index entries behind; a read that
meets one drops it. Sessions stored before these indexes existed are indexed once, by
the first replica that reads an index (marker ``{p}idx:1``).
"""

from __future__ import annotations

import builtins
import contextlib
from collections.abc import AsyncIterator
from functools import partial
from typing import Any

from ..record import SessionRecord
from .base import View
from .changes import Watch, Watching
from .redis_core import RedisCore

__all__ = ["RedisReads"]

_MIGRATE_BATCH = 1000


class RedisReads(RedisCore):
    """The reads of a Redis store, over its connection, keys and decoding."""

    _indexed = False

    def _view_key(self, view: View, key: str | None) -> str:
        if view == "group":
            return self._k("g", key or "")
        if view == "identity":
            return self._k("id", key or "")
        return self._p + {"all": "all", "unexported": "unexp", "ready": "ready"}[view]

    async def find_by_key(self, api_key: str) -> SessionRecord | None:
        session_id = await self.run(self.client.get(self._key_of(api_key)))
        if session_id is None:
            return None
        record = await self.get(session_id.decode())
        return record if record is not None and record.api_key == api_key else None

    async def list(self, group_id: str | None = None) -> builtins.list[SessionRecord]:
        index = self._p + "all" if group_id is None else self._k("g", group_id)
        return await self.records(index, await self.run(self.client.zrange(index, 0, -1)))

    async def count_open(self) -> int:
        return int(await self.run(self.client.scard(self._p + "open")))

    async def records(self, index: str, ids: builtins.list[bytes]) -> builtins.list[
            SessionRecord]:
        """The sessions ``ids`` name, in order; entries of expired ones are dropped."""
        if not ids:
            return []
        pipe = self.client.pipeline(transaction=False)
        for raw_id in ids:
            pipe.hgetall(self._k("s", raw_id.decode()))
        records = [self._decode(row) for row in await self.run(pipe.execute())]
        gone = [raw_id for raw_id, r in zip(ids, records, strict=True) if r is None]
        if gone:
            await self.run(self.client.zrem(index, *gone))
        return [r for r in records if r is not None]

    async def scan(
        self, view: View, *, key: str | None = None, after: int = -1, offset: int = 0,
        limit: int,
    ) -> builtins.list[SessionRecord]:
        await self._ensure_indexed()
        index = self._view_key(view, key)
        found: builtins.list[SessionRecord] = []
        while len(found) < limit:
            want = limit - len(found)
            ids = await self.run(self.client.zrangebyscore(
                index, f"({after}", "+inf", start=offset, num=want, withscores=True))
            if not ids:
                break
            records = await self.records(index, [i for i, _ in ids])
            found += records
            if len(ids) < want:
                break
            if len(records) == len(ids):
                continue  # (the loop ends: found is full)
            after, offset = int(ids[-1][1]), 0  # expired ones were dropped: read on
        return found

    async def count(self, view: View, *, key: str | None = None) -> int:
        await self._ensure_indexed()
        return int(await self.run(self.client.zcard(self._view_key(view, key))))

    async def idle(self, cutoff: float, limit: int) -> builtins.list[SessionRecord]:
        await self._ensure_indexed()
        index = self._p + "active"
        ids = await self.run(self.client.zrangebyscore(
            index, "-inf", repr(cutoff), start=0, num=limit))
        return await self.records(index, ids)

    async def version(self) -> int:
        return int(await self.run(self.client.get(self._p + "ver")) or 0)

    @contextlib.asynccontextmanager
    async def watch(self) -> AsyncIterator[Watch]:
        pubsub = self.client.pubsub()
        try:
            await self.run(pubsub.subscribe(self.changes_channel))
            while True:  # subscribed once Redis confirms: no publish after it is missed
                message = await self.run(pubsub.get_message(timeout=self._timeout))
                if message is None or message["type"] == "subscribe":
                    break
            yield Watching(partial(self._woken, pubsub), self.version, await self.version(),
                           self._options.watch_check_s)
        finally:
            with contextlib.suppress(*self.errors):  # a broken connection is dropped anyway
                await pubsub.aclose()

    async def _ensure_indexed(self) -> None:
        """Index sessions stored before the indexes existed (once per store)."""
        if self._indexed:
            return
        marker = self._p + "idx:1"
        if not await self.run(self.client.exists(marker)):
            start = 0
            while True:
                ids = await self.run(self.client.zrange(
                    self._p + "all", start, start + _MIGRATE_BATCH - 1))
                if not ids:
                    break
                pipe = self.client.pipeline(transaction=False)
                for raw_id in ids:
                    pipe.hgetall(self._k("s", raw_id.decode()))
                for r in map(self._decode, await self.run(pipe.execute())):
                    if r is None:
                        continue
                    pipe.zadd(self._k("id", r.identity), {r.session_id: r.created_seq})
                    pipe.zadd(self._p + "active", {r.session_id: r.last_active_at})
                    if not r.exported:
                        pipe.zadd(self._p + "unexp", {r.session_id: r.created_seq})
                        if r.ended and r.ended_seq is not None:
                            pipe.zadd(self._p + "ready", {r.session_id: r.ended_seq})
                await self.run(pipe.execute())
                start += _MIGRATE_BATCH
            await self.run(self.client.set(marker, 1))
        self._indexed = True

    async def _woken(self, pubsub: Any, timeout: float) -> bool:
        """Whether a change came within ``timeout`` (one look serves every one so far)."""
        woken = False
        while await self.run(pubsub.get_message(ignore_subscribe_messages=True,
                                                timeout=0 if woken else timeout)) is not None:
            woken = True
        return woken
