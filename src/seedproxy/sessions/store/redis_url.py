"""The Redis store's URL and the client it opens.

Two forms, each with the same options after ``?``:

- ``redis://[:password@]host:port/db`` (also ``rediss://``, ``unix://``): one server,
  as redis-py's ``Redis.from_url`` reads it.
- ``redis+sentinel://[:password@]host:port[,host:port...]/service_name[/db]`` (the
  ``Redis-Sentinel-Url`` package's form): the primary the Sentinels (port 26379 when
  left out) name for ``service_name``, through redis-py's ``Sentinel.master_for``, which
  asks again whenever a connection breaks or meets a demoted primary: the store follows
  a failover. The password is the data nodes'; the Sentinels are reached without one.

Options: ``prefix`` (key prefix, ``sp:``), ``ended_ttl_s``, ``timeout_s`` (5),
``watch_check_s`` (1), ``wait_replicas`` (0: off; N: every write is acknowledged only
once N replicas have it, Redis's ``WAIT``) and ``wait_timeout_s`` (how long ``WAIT``
may take, ``timeout_s / 2`` when left out; it must stay below ``timeout_s``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit, urlunsplit

from ...errors import ConfigError

__all__ = ["SENTINEL_SCHEME", "RedisOptions", "open_client", "parse_url"]

SENTINEL_SCHEME = "redis+sentinel"
_SENTINEL_PORT = 26379


@dataclass(frozen=True)
class RedisOptions:
    """What a store URL says. ``url`` is the URL without options (a standalone server's,
    for ``Redis.from_url``); ``sentinels`` is empty unless it is a Sentinel URL."""

    url: str
    prefix: str
    ended_ttl_s: float | None
    timeout_s: float
    watch_check_s: float
    wait_replicas: int
    wait_timeout_s: float
    sentinels: tuple[tuple[str, int], ...] = ()
    service: str = ""
    db: int = 0
    password: str | None = None


def parse_url(url: str) -> RedisOptions:
    """The options ``url`` names; ``ConfigError`` for an unknown option, a value that is
    not a positive number, or a Sentinel URL without Sentinels or a service name."""
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    prefix = query.pop("prefix", ["sp:"])[0]
    ttl = _positive(query, "ended_ttl_s")
    timeout = _positive(query, "timeout_s") or 5.0
    check = _positive(query, "watch_check_s") or 1.0
    replicas = _count(query, "wait_replicas")
    wait = _positive(query, "wait_timeout_s") or timeout / 2
    if query:
        raise ConfigError(f"unknown redis store option(s): {', '.join(sorted(query))}")
    if replicas and wait >= timeout:
        raise ConfigError(f"wait_timeout_s ({wait:g}) must be below timeout_s ({timeout:g})")
    options = RedisOptions(urlunsplit(parts._replace(query="")), prefix, ttl, timeout, check,
                           replicas, wait)
    if parts.scheme != SENTINEL_SCHEME:
        return options
    return _sentinel(options, parts.netloc, parts.path)


def _sentinel(options: RedisOptions, netloc: str, path: str) -> RedisOptions:
    password, _, hosts = netloc.rpartition("@")
    sentinels = tuple(_host_port(item) for item in hosts.split(",") if item)
    names = [part for part in path.split("/") if part]
    if not sentinels or not names or len(names) > 2:
        raise ConfigError(
            f"a Sentinel store URL is {SENTINEL_SCHEME}://[:password@]host:port[,host:port...]"
            f"/service_name[/db]; got {options.url!r}")
    if len(names) == 2 and not names[1].isdigit():
        raise ConfigError(f"the database in a Sentinel store URL is a number, got {names[1]!r}")
    return replace(options, sentinels=sentinels, service=unquote(names[0]),
                   db=int(names[1]) if len(names) == 2 else 0,
                   password=unquote(password.partition(":")[2]) or None)


def _host_port(item: str) -> tuple[str, int]:
    host, _, port = item.rpartition(":") if ":" in item else (item, "", "")
    if not host or (port and not port.isdigit()):
        raise ConfigError(f"a Sentinel is host:port, got {item!r}")
    return host, int(port) if port else _SENTINEL_PORT


def open_client(options: RedisOptions, **connection: Any) -> tuple[Any, Any | None]:
    """A ``redis.asyncio.Redis`` on the server (or Sentinel-named primary) ``options``
    name, and the ``Sentinel`` it asks (None for one server), which its owner closes
    after the client; ``connection`` goes to every data-node connection."""
    import redis.asyncio as aioredis
    from redis.asyncio.sentinel import Sentinel

    if not options.sentinels:
        return aioredis.Redis.from_url(options.url, **connection), None
    sentinels = Sentinel(  # type: ignore[no-untyped-call]
        list(options.sentinels),
        sentinel_kwargs={"socket_timeout": options.timeout_s,
                         "socket_connect_timeout": options.timeout_s},
        db=options.db, password=options.password, **connection,
    )
    return sentinels.master_for(options.service), sentinels


def _count(query: dict[str, list[str]], name: str) -> int:
    text = query.pop(name, ["0"])[0]
    if not text.isdigit():
        raise ConfigError(f"{name} must be a whole number, got {text!r}")
    return int(text)


def _positive(query: dict[str, list[str]], name: str) -> float | None:
    text = query.pop(name, [None])[0]
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"{name} must be a number, got {text!r}") from None
    if not value > 0:
        raise ConfigError(f"{name} must be positive")
    return value
