"""A Redis store's connection, keys, outage rules and reads: the core ``RedisStore`` and
the fleet board (``fleet/redis_board.py``) run on. See ``redis.py`` for the keys and
the outage rules (a script's deadline, a broken connection re-made, ``wait_replicas``).

``wait_replicas``: ``WAIT`` counts the replicas that acknowledged the writes of the
connection that sends it, so a script and its ``WAIT`` travel in one pipeline (one
connection, one round trip). Replication is one ordered stream: a replica that
acknowledged this write holds every write the primary made before it, on any
connection. When fewer replicas than asked acknowledge within the timeout the call is a
``StoreError`` (503): the write may yet be on the primary (Redis cannot take it back),
and a retry of the request (its ``x-stainless-retry-count``) finds its index again by
the retry memory and replaces it.

Reads: the views (``base.View``) are zsets, beside ``{p}all`` and ``{p}g:{group}``:
``{p}id:{identity}`` and ``{p}unexp`` (not exported) by ``created_seq``, ``{p}ready``
(ended, not exported) by ``ended_seq``, ``{p}active`` by last activity (wall clock: the
TTL sweep's order); ``{p}ver`` counts changes. The scripts that change a session keep
them, so every replica reads the same. A script that may change an export's choice
publishes on ``{p}changes``, waking a waiting export on any replica; it also reads
``{p}ver`` every ``check_s`` (a message lost with a broken connection). Index entries
of sessions Redis expired (``ended_ttl_s``) are dropped by the read that meets them;
sessions stored before these indexes are indexed once, by the first replica that reads
one (marker ``{p}idx:1``).
"""

from __future__ import annotations

import builtins
import contextlib
import hashlib
import time
from collections.abc import AsyncIterator
from functools import partial
from typing import Any

import orjson

from ...errors import ConfigError, StoreError
from ..record import SessionRecord
from . import redis_scripts as lua
from .base import View
from .changes import Watch, Watching
from .redis_url import open_client, parse_url

__all__ = ["RedisCore"]

_DEADLINE_SHARE = 0.75
"""A script's deadline, as a share of the time its caller waits for the answer."""
_MIGRATE_BATCH = 1000


class RedisCore:
    """One Redis store's client (a standalone server, or a Sentinel-named primary)."""

    def __init__(self, url: str) -> None:
        try:
            import redis.asyncio  # noqa: F401  (open_client's, imported here for the hint)
            from redis.asyncio.retry import Retry
            from redis.backoff import NoBackoff
            from redis.exceptions import ConnectionError as RedisConnectionError
            from redis.exceptions import RedisError
        except ImportError as exc:
            raise ConfigError(
                "the Redis store needs the redis package: pip install -e '.[redis]'"
            ) from exc
        options = parse_url(url)
        self._options, self._timeout = options, options.timeout_s
        # Shared with the fleet board (fleet/redis_board.py): one connection, one key
        # prefix and the same outage rules for every replica's state.
        self.key_prefix = self._p = options.prefix
        self.changes_channel = self._p + "changes"
        """The channel a change an export may wait on is published on."""
        self.errors: tuple[type[BaseException], ...] = (RedisError, OSError)
        """What a Redis failure raises on ``client`` (its own connection per pub/sub)."""
        self.client, self._sentinels = open_client(
            options,
            socket_timeout=self._timeout,
            socket_connect_timeout=self._timeout,
            # Only a broken connection is retried: a timed-out command may yet run.
            retry=Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,)),
        )

    def script(self, body: str) -> Any:
        """``body``, a Lua script that writes, run as the store's own are: with the
        deadline guard (see Outages), its deadline passed as the last ARGV, and acknowledged
        once ``wait_replicas`` replicas hold what it wrote."""
        return self._guarded(self.client.register_script(lua.GUARD + body), writes=True)

    def _k(self, kind: str, session_id: str) -> str:
        return f"{self._p}{kind}:{session_id}"

    def _session_keys(self, session_id: str) -> builtins.list[str]:
        kinds = ("s", "i", "r", "rz", "p", "o", "w", "c", "q", "l")  # l: its export lease
        return [self._k(kind, session_id) for kind in kinds]

    def _key_of(self, api_key: str) -> str:
        return self._p + "k:" + hashlib.sha256(api_key.encode()).hexdigest()

    def _guarded(self, script: Any, *, writes: bool) -> Any:
        """``script`` called with its deadline appended to ``args`` (and, if it ``writes``
        and ``wait_replicas`` is set, followed by ``WAIT``)."""
        replicas = self._options.wait_replicas if writes else 0

        def call(*, keys: builtins.list[str], args: builtins.list[Any] | None = None) -> Any:
            deadline = time.time() + self._timeout * _DEADLINE_SHARE
            if replicas:
                return _run_waited(self.client, script, keys=keys,
                                  args=[*(args or []), repr(deadline)], replicas=replicas,
                                  wait_s=self._options.wait_timeout_s)
            return script(keys=keys, args=[*(args or []), repr(deadline)])

        return call

    async def run(self, awaitable: Any) -> Any:
        """Await a command on ``client``; a Redis failure is a ``StoreError``."""
        try:
            return await awaitable
        except self.errors as exc:
            raise StoreError(f"Redis store failed: {type(exc).__name__}: {exc}") from exc
        except RuntimeError as exc:
            # uvloop's answer to a write on a connection closed under it (MagicStack/
            # uvloop#506), where asyncio's loop raises ConnectionError: a lost server
            if not str(exc).endswith("; the handler is closed"):
                raise
            raise StoreError(f"Redis store failed: ConnectionError: {exc}") from exc

    @staticmethod
    def _decode(raw: dict[bytes, bytes]) -> SessionRecord | None:
        if not raw or b"rec" not in raw:
            return None

        def text(field: bytes) -> str | None:
            return raw[field].decode() if field in raw else None

        data = orjson.loads(raw[b"rec"])
        data.update(
            created_seq=int(raw[b"created_seq"]), next_index=int(raw[b"next_index"]),
            last_active_at=float(raw[b"last_active_at"]), ended=raw[b"ended"] == b"1",
            ended_seq=int(raw[b"ended_seq"]) if raw[b"ended_seq"] else None,
            reward=float(raw[b"reward"]) if raw[b"reward"] else None,
            exported=raw[b"exported"] == b"1", end_status=text(b"es"),
            store_epoch=text(b"epoch"), last_order=text(b"lo"),
            interaction_count=int(raw[b"n"]) if b"n" in raw else None)
        if b"ls" in raw:
            shown = orjson.loads(raw[b"ls"])
            data["last_upstream"] = shown["upstream"]
            data["last_weight_version"] = shown["weight_version"]
        return SessionRecord.from_dict(data)

    async def get(self, session_id: str) -> SessionRecord | None:
        return self._decode(await self.run(self.client.hgetall(self._k("s", session_id))))

    async def _expire(self, session_id: str) -> None:
        if self._options.ended_ttl_s is None:
            return
        ttl_ms = int(self._options.ended_ttl_s * 1000)
        record = await self.get(session_id)
        pipe = self.client.pipeline(transaction=False)
        for key in self._session_keys(session_id):
            pipe.pexpire(key, ttl_ms)
        if record is not None:
            pipe.pexpire(self._key_of(record.api_key), ttl_ms)
        await self.run(pipe.execute())

    async def delete(self, session_id: str) -> bool:
        record = await self.get(session_id)
        if record is None:
            return False
        pipe = self.client.pipeline(transaction=True)
        pipe.delete(*self._session_keys(session_id))
        pipe.delete(self._key_of(record.api_key))
        pipe.zrem(self._p + "all", session_id)
        pipe.srem(self._p + "open", session_id)
        if record.group_id is not None:
            pipe.zrem(self._k("g", record.group_id), session_id)
        pipe.zrem(self._k("id", record.identity), session_id)
        for view in ("unexp", "ready", "active"):
            pipe.zrem(self._p + view, session_id)
        pipe.incr(self._p + "ver")
        pipe.publish(self.changes_channel, "deleted")
        await self.run(pipe.execute())
        return True

    # -- reads ------------------------------------------------------------------------

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


async def _run_waited(
    client: Any, script: Any, *, keys: builtins.list[Any], args: builtins.list[Any],
    replicas: int, wait_s: float,
) -> Any:
    """``script`` (a registered ``AsyncScript``) run on ``client``, then ``WAIT replicas``
    for at most ``wait_s``; its result once enough replicas hold the write."""
    from redis.exceptions import NoScriptError

    wait_ms = max(1, int(wait_s * 1000))

    def pipeline() -> Any:
        pipe = client.pipeline(transaction=False)
        pipe.evalsha(script.sha, len(keys), *keys, *args)
        pipe.wait(replicas, wait_ms)
        return pipe

    try:
        result, acked = await pipeline().execute()
    except NoScriptError:  # a restarted or new primary: load it and send again (never ran)
        script.sha = await client.script_load(script.script)
        result, acked = await pipeline().execute()
    if int(acked) < replicas:
        raise StoreError(
            f"Redis store: the write reached {int(acked)} of the {replicas} replica(s) "
            f"wait_replicas asks for within {wait_s:g}s; not acknowledged")
    return result
