"""The one error map of the request path: what an upstream failure is, and its status.

Invariants:
- A transport failure while reading has the status ``transport.failure.upstream_failure`` gives
  it (504 for a timeout, else 502), wherever it happens (a single stream, a fan-out
  pump, a bridge, token-in-token-out).
- A stream chunk that carries ``error`` (SGLang's and vLLM's way of ending a failing
  stream) is an ``answer_shape.UpstreamFailed`` with that error's status
  (``check_chunk``; 502 when it names none).
- An upstream that answered >= 400 is an ``UpstreamAnswered``: its status, and its
  message, type and ``param`` (a string of at most ``_PARAM_CHARS``) re-shaped into
  OpenAI's error object.
"""

from __future__ import annotations

from typing import Any

import orjson

from ..errors import UpstreamError

__all__ = ["UpstreamAnswered"]

_PARAM_CHARS = 256


class UpstreamAnswered(UpstreamError):
    """An upstream answered with an error status; its body keeps the upstream's message,
    type and param, and its status as ``code``."""

    def __init__(self, status: int, content: bytes) -> None:
        message, self.error_type, param = _message(status, content)
        super().__init__(message, param=param, code=status, status_code=status)


def _message(status: int, content: bytes) -> tuple[str, str, str | None]:
    """An upstream error's message, type and param (SGLang's flat shape, OpenAI's,
    FastAPI's)."""
    try:
        data = orjson.loads(content)
    except orjson.JSONDecodeError:
        data = None
    message = param = None
    error_type = "upstream_error"
    if isinstance(data, dict):
        inner: dict[str, Any] = data["error"] if isinstance(data.get("error"), dict) else data
        message = inner.get("message") or inner.get("detail")
        error_type = str(inner.get("type") or error_type)
        param = inner.get("param")
    if not isinstance(message, str):
        message = content.decode("utf-8", "replace")[:2000] or f"upstream answered {status}"
    if not isinstance(param, str) or len(param) > _PARAM_CHARS:
        param = None
    return message, error_type, param
