"""The Redis store's URL: ``redis://host:port/db?prefix=P&ended_ttl_s=N&timeout_s=N
&watch_check_s=N``."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit, urlunsplit

from ...errors import ConfigError

__all__ = ["parse_url"]


def parse_url(url: str) -> tuple[str, str, float | None, float, float]:
    """(the URL without options, key prefix, ``ended_ttl_s`` or None, ``timeout_s``,
    ``watch_check_s``); ``ConfigError`` for an unknown option or a value that is not a
    positive number."""
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    prefix = query.pop("prefix", ["sp:"])[0]
    ttl = _positive(query, "ended_ttl_s")
    timeout = _positive(query, "timeout_s")
    check = _positive(query, "watch_check_s")
    if query:
        raise ConfigError(f"unknown redis store option(s): {', '.join(sorted(query))}")
    return (urlunsplit(parts._replace(query="")), prefix, ttl,
            5.0 if timeout is None else timeout, 1.0 if check is None else check)


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
