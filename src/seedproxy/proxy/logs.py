"""Logging set-up: one JSON line per proxied or refused request, human lines for the rest."""

from __future__ import annotations

import logging
import sys
import threading
import time

import orjson

__all__ = ["configure_logging", "flush_logs"]

_REQUEST_FIELDS = ("session", "index", "seed", "upstream", "status", "proxy_ms", "upstream_ms")
_REFUSAL_FIELDS = ("route", "reason", "detail")
"""Written only when set: a refused request's route, reason label and message."""


class _RequestFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = {"event": record.getMessage(),
                **{key: getattr(record, key, None) for key in _REQUEST_FIELDS}}
        line.update((key, value) for key in _REFUSAL_FIELDS
                    if (value := getattr(record, key, None)) is not None)
        return orjson.dumps(line).decode()


class _CurrentStderr:
    """Whatever ``sys.stderr`` is when a line is written, not when logging was set up."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


class _BatchedHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes request lines in batches: one write per ``_BATCH`` lines or per
    ``_INTERVAL_S``, whichever comes first. A daemon thread flushes a quiet tail;
    ``close()`` and interpreter exit flush everything."""

    _BATCH = 64
    _INTERVAL_S = 0.1

    def __init__(self) -> None:
        super().__init__(_CurrentStderr())
        self._lines: list[str] = []
        self._last = time.monotonic()
        self._stop = threading.Event()
        threading.Thread(target=self._flush_quiet_tail, name="seedproxy-log", daemon=True).start()

    def emit(self, record: logging.LogRecord) -> None:
        try:  # logging must never break a request
            line = self.format(record)
            with self.lock:  # type: ignore[union-attr]
                self._lines.append(line)
                if len(self._lines) >= self._BATCH or (
                        time.monotonic() - self._last >= self._INTERVAL_S):
                    self._write()
        except Exception:  # noqa: BLE001
            self.handleError(record)

    def flush(self) -> None:
        with self.lock:  # type: ignore[union-attr]
            try:
                self._write()
            except (OSError, ValueError):  # the stream is gone (closed at exit, or by a test)
                self._lines.clear()

    def _write(self) -> None:
        self._last = time.monotonic()
        if self._lines:
            text = "\n".join(self._lines) + "\n"
            self._lines.clear()
            self.stream.write(text)
            self.stream.flush()

    def _flush_quiet_tail(self) -> None:
        while not self._stop.wait(self._INTERVAL_S):
            self.flush()

    def close(self) -> None:
        self._stop.set()
        self.flush()
        super().close()


def configure_logging(level: str = "INFO") -> None:
    """Send seedproxy's logs to stderr. Idempotent."""
    root = logging.getLogger("seedproxy")
    if getattr(root, "_seedproxy_configured", False):
        return
    root.setLevel(level)
    plain = logging.StreamHandler(_CurrentStderr())
    plain.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    plain.addFilter(lambda r: r.name != "seedproxy.request")
    structured = _BatchedHandler()
    structured.setFormatter(_RequestFormatter())
    structured.addFilter(lambda r: r.name == "seedproxy.request")
    root.addHandler(plain)
    root.addHandler(structured)
    root.propagate = False
    root._seedproxy_configured = True  # type: ignore[attr-defined]


def flush_logs() -> None:
    """Write out batched request lines now (a process that dies by re-raised SIGTERM
    runs no exit hooks)."""
    for handler in logging.getLogger("seedproxy").handlers:
        handler.flush()
