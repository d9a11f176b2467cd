"""A Sentinel-managed Redis on loopback: a primary, replicas and Sentinels from Debian's
``redis-server`` and ``redis-sentinel``, each on a free port (``RedisServer``).

The Sentinels judge a primary down after ``DOWN_AFTER_MS`` and fail over at once, so a
test that SIGKILLs the primary sees a replica promoted within a few seconds. Without
``redis-sentinel``, tests skip on a developer's machine and fail under ``CI=true``.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from pathlib import Path

import pytest
import redis

from tests.helpers.redis_server import RedisServer, find_redis_server, redis_or_skip

__all__ = ["DOWN_AFTER_MS", "SentinelSet", "sentinel_or_skip", "wait_synced"]

DOWN_AFTER_MS = 500
_FAILOVER_TIMEOUT_MS = 2000


def sentinel_or_skip() -> str:
    """The redis-sentinel binary; else fail (under CI) or skip with a loud reason."""
    redis_or_skip()
    found = shutil.which("redis-sentinel") or next(
        (c for c in ("/usr/bin/redis-sentinel",) if Path(c).exists()), None)
    if found is not None:
        return found
    message = ("redis-sentinel NOT FOUND: the Sentinel failover tests did not run. "
               "Install it (apt-get install redis-sentinel) to run them.")
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(message + " CI=true requires it.", pytrace=False)
    pytest.skip(message)


def wait_synced(port: int, replicas: int, timeout_s: float = 60.0) -> None:
    """Wait until the server on ``port`` is a primary with ``replicas`` replicas online
    (``INFO replication``)."""
    deadline = time.monotonic() + timeout_s
    with redis.Redis(port=port, socket_timeout=10) as client:
        while True:
            info = client.info("replication")
            online = [v for k, v in info.items()
                      if k.startswith("slave") and isinstance(v, dict)
                      and v.get("state") == "online"]
            if info["role"] == "master" and len(online) >= replicas:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"127.0.0.1:{port} has not {replicas} replicas: {info}")
            time.sleep(0.05)


class _Sentinel(RedisServer):
    """A Sentinel watching ``service`` at ``primary_port`` (it rewrites its config file)."""

    def __init__(self, binary: str, service: str, primary_port: int) -> None:
        self._watch = (f"sentinel monitor {service} 127.0.0.1 {primary_port} 1\n"
                       f"sentinel down-after-milliseconds {service} {DOWN_AFTER_MS}\n"
                       f"sentinel failover-timeout {service} {_FAILOVER_TIMEOUT_MS}\n")
        super().__init__(binary)

    def _arguments(self, binary: str, folder: str) -> list[str]:
        config = Path(folder) / "sentinel.conf"
        config.write_text(f"bind 127.0.0.1\ndir {folder}\n{self._watch}")
        return [binary, str(config)]


class SentinelSet:
    """A primary, ``replicas`` replicas of it and ``sentinels`` Sentinels naming it as
    ``service``; ``url(options)`` is the store URL through the Sentinels."""

    def __init__(self, *, replicas: int = 2, sentinels: int = 1, service: str = "sp") -> None:
        sentinel = sentinel_or_skip()
        binary = find_redis_server()
        assert binary is not None
        self.service = service
        self.primary = RedisServer(binary)
        self.replicas = [RedisServer(binary, "--replicaof", "127.0.0.1", str(self.primary.port))
                         for _ in range(replicas)]
        self.sentinels = [_Sentinel(sentinel, service, self.primary.port)
                          for _ in range(sentinels)]
        wait_synced(self.primary.port, replicas)

    def url(self, options: str = "") -> str:
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)
        return f"redis+sentinel://{hosts}/{self.service}/0" + (f"?{options}" if options else "")

    def primary_port(self) -> int:
        """The primary's port, as the first Sentinel names it now."""
        with redis.Redis(port=self.sentinels[0].port, socket_timeout=10) as client:
            _, port = client.sentinel_get_master_addr_by_name(self.service)
        return int(port)

    def kill_primary(self) -> int:
        """SIGKILL the primary; its port."""
        port = self.primary.port
        os.kill(self.primary.proc.pid, signal.SIGKILL)
        self.primary.proc.wait()
        return port

    def stop(self) -> None:
        for server in [*self.sentinels, *self.replicas, self.primary]:
            server.stop()
