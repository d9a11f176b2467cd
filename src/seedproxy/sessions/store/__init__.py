"""Session stores, chosen by URL: ``memory://`` (default), ``sqlite:///path.db``,
``redis://host:port/db``, ``redis+sentinel://host:port[,...]/service[/db]``. Durable
stores are imported lazily."""

from __future__ import annotations

from ...errors import ConfigError, StoreError
from .base import RETRY_MEMORY, SessionStore
from .memory import MemoryStore

__all__ = ["RETRY_MEMORY", "MemoryStore", "SessionStore", "open_store"]


def open_store(url: str) -> SessionStore:
    """Return the store ``url`` names; ``ConfigError`` for an unknown scheme."""
    scheme = url.split("://", 1)[0] if "://" in url else ""
    if scheme == "memory":
        return MemoryStore()
    if scheme == "sqlite":
        from .sqlite import SqliteStore
        from .sqlite_open import path_of

        try:
            path = path_of(url)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        try:
            return SqliteStore(path)
        except StoreError as exc:
            raise ConfigError(exc.message) from None
    if scheme in ("redis", "rediss", "unix", "redis+sentinel"):
        from .redis import RedisStore

        try:
            return RedisStore(url)
        except ValueError as exc:
            raise ConfigError(f"bad redis store URL {url!r}: {exc}") from None
    raise ConfigError(f"unsupported store URL {url!r}: use memory://, sqlite:///PATH, "
                      "redis://HOST:PORT/DB or redis+sentinel://HOST:PORT[,...]/SERVICE[/DB]")
