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
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from ..record import SessionRecord
from .base import View
from .changes import Watch, wait_changed
from .redis_core import RedisCore

__all__ = ["RedisReads"]

_MIGRATE_BATCH = 1000


class RedisReads:
    """The reads of a Redis store (``redis_core.py``), over its connection, keys and decoding."""

    def __init__(self, store: RedisCore) -> None:
        self._store = store
        self._indexed = False

    def _view_key(self, view: View, key: str | None) -> str:
        if view == "group":
            return self._store._k("g", key or "")
        if view == "identity":
            return self._store._k("id", key or "")
        return self._store._p + {"all": "all", "unexported": "unexp", "ready": "ready"}[view]

    async def records(self, index: str, ids: builtins.list[bytes]) -> builtins.list[
            SessionRecord]:
        """The sessions ``ids`` name, in order; entries of expired ones are dropped."""
        if not ids:
            return []
        pipe = self._store._redis.pipeline(transaction=False)
        for raw_id in ids:
            pipe.hgetall(self._store._k("s", raw_id.decode()))
        records = [self._store._decode(row) for row in await self._store._call(pipe.execute())]
        gone = [raw_id for raw_id, r in zip(ids, records, strict=True) if r is None]
        if gone:
            await self._store._call(self._store._redis.zrem(index, *gone))
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
            ids = await self._store._call(self._store._redis.zrangebyscore(
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
        return int(await self._store._call(self._store._redis.zcard(self._view_key(view, key))))

    async def idle(self, cutoff: float, limit: int) -> builtins.list[SessionRecord]:
        await self._ensure_indexed()
        index = self._store._p + "active"
        ids = await self._store._call(self._store._redis.zrangebyscore(
            index, "-inf", repr(cutoff), start=0, num=limit))
        return await self.records(index, ids)

    async def version(self) -> int:
        return int(await self._store._call(self._store._redis.get(self._store._p + "ver")) or 0)

    def watch(self) -> AbstractAsyncContextManager[Watch]:
        return self._watch()

    @contextlib.asynccontextmanager
    async def _watch(self) -> AsyncIterator[Watch]:
        pubsub = self._store._redis.pubsub()
        try:
            await self._store._call(pubsub.subscribe(self._store.changes_channel))
            while True:  # subscribed once Redis confirms: no publish after it is missed
                message = await self._store._call(pubsub.get_message(timeout=self._store._timeout))
                if message is None or message["type"] == "subscribe":
                    break
            yield _FeedWatch(pubsub, self._store._call, self.version, await self.version(),
                             self._store._check_s)
        finally:
            with contextlib.suppress(*self._store._errors):  # a broken connection is dropped anyway
                await pubsub.aclose()

    async def _ensure_indexed(self) -> None:
        """Index sessions stored before the indexes existed (once per store)."""
        if self._indexed:
            return
        marker = self._store._p + "idx:1"
        if not await self._store._call(self._store._redis.exists(marker)):
            start = 0
            while True:
                ids = await self._store._call(self._store._redis.zrange(
                    self._store._p + "all", start, start + _MIGRATE_BATCH - 1))
                if not ids:
                    break
                pipe = self._store._redis.pipeline(transaction=False)
                for raw_id in ids:
                    pipe.hgetall(self._store._k("s", raw_id.decode()))
                for record in map(self._store._decode, await self._store._call(pipe.execute())):
                    if record is not None:
                        self._index_legacy(pipe, record)
                await self._store._call(pipe.execute())
                start += _MIGRATE_BATCH
            await self._store._call(self._store._redis.set(marker, 1))
        self._indexed = True

    def _index_legacy(self, pipe: Any, r: SessionRecord) -> None:
        sid = r.session_id
        pipe.zadd(self._store._k("id", r.identity), {sid: r.created_seq})
        pipe.zadd(self._store._p + "active", {sid: r.last_active_at})
        if not r.exported:
            pipe.zadd(self._store._p + "unexp", {sid: r.created_seq})
            if r.ended and r.ended_seq is not None:
                pipe.zadd(self._store._p + "ready", {sid: r.ended_seq})


class _FeedWatch:
    def __init__(
        self, pubsub: Any, call: Callable[[Any], Awaitable[Any]],
        version: Callable[[], Awaitable[int]], seen: int, check_s: float | None,
    ) -> None:
        self._pubsub, self._call, self._version = pubsub, call, version
        self._seen, self._check_s = seen, check_s

    async def wait(self, timeout: float) -> None:
        self._seen = await wait_changed(self._woken, self._version, self._seen, self._check_s,
                                        timeout)

    async def _woken(self, timeout: float) -> bool:
        message = await self._call(
            self._pubsub.get_message(ignore_subscribe_messages=True, timeout=timeout))
        if message is None:
            return False
        while message is not None:  # one look serves every change so far
            message = await self._call(
                self._pubsub.get_message(ignore_subscribe_messages=True, timeout=0))
        return True
