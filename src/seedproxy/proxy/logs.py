"""Logging set-up: one JSON line per proxied request, human lines for the rest."""

from __future__ import annotations

import logging
import sys
from typing import Any

import orjson

__all__ = ["configure_logging"]

_REQUEST_FIELDS = ("session", "index", "seed", "upstream", "status", "proxy_ms", "upstream_ms")


class _RequestFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {"event": record.getMessage()}
        for key in _REQUEST_FIELDS:
            line[key] = getattr(record, key, None)
        return orjson.dumps(line).decode()


def configure_logging(level: str = "INFO") -> None:
    """Send seedproxy's logs to stderr. Idempotent."""
    root = logging.getLogger("seedproxy")
    if getattr(root, "_seedproxy_configured", False):
        return
    root.setLevel(level)
    plain = logging.StreamHandler(sys.stderr)
    plain.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    plain.addFilter(lambda r: r.name != "seedproxy.request")
    structured = logging.StreamHandler(sys.stderr)
    structured.setFormatter(_RequestFormatter())
    structured.addFilter(lambda r: r.name == "seedproxy.request")
    root.addHandler(plain)
    root.addHandler(structured)
    root.propagate = False
    root._seedproxy_configured = True  # type: ignore[attr-defined]
