"""A Redis store's connection, keys and outage rules: the core its leases and reads
(``redis_leases.py``, ``redis_reads.py``), ``RedisStore`` and the fleet board
(``fleet/redis_board.py``) run on. See ``redis.py`` for the keys and the outage
rules (a script's deadline, a broken connection re-made, ``wait_replicas``).

``wait_replicas``: ``WAIT`` counts the replicas that acknowledged the writes of the
connection that sends it, so a script and its ``WAIT`` travel in one pipeline (one
connection, one round trip). Replication is one ordered stream: a replica that
acknowledged this write holds every write the primary made before it, on any
connection. When fewer replicas than asked acknowledge within the timeout the call is a
``StoreError`` (503): the write may yet be on the primary (Redis cannot take it back),
and a retry of the request (its ``x-stainless-retry-count``) finds its index again by
the retry memory and replaces it.
"""

from __future__ import annotations

import builtins
import hashlib
import time
from typing import Any

import orjson

from ...errors import ConfigError, StoreError
from ..record import SessionRecord
from . import redis_scripts as lua
from .redis_url import open_client, parse_url

__all__ = ["RedisCore"]

_DEADLINE_SHARE = 0.75
"""A script's deadline, as a share of the time its caller waits for the answer."""


def _closed_transport(exc: RuntimeError) -> bool:
    """Whether ``exc`` is uvloop's answer to a write on a connection that closed under it
    (MagicStack/uvloop#506), a lost connection where asyncio's own loop raises
    ``ConnectionError``: a Redis server killed between connect and command."""
    return str(exc).endswith("; the handler is closed")


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
            if not _closed_transport(exc):
                raise
            raise StoreError(f"Redis store failed: ConnectionError: {exc}") from exc

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
        data["end_status"] = raw[b"es"].decode() if b"es" in raw else None
        data["reward"] = float(raw[b"reward"]) if raw[b"reward"] else None
        data["exported"] = raw[b"exported"] == b"1"
        data["store_epoch"] = raw[b"epoch"].decode() if b"epoch" in raw else None
        data["interaction_count"] = int(raw[b"n"]) if b"n" in raw else None
        data["last_order"] = raw[b"lo"].decode() if b"lo" in raw else None
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
