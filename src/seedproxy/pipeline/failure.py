"""The one error map of the request path: what an upstream failure is, and its status.

Invariants:
- A transport failure while reading is a 504 when it is a timeout, else a 502,
  wherever it happens (a single stream, a fan-out pump, a bridge, token-in-token-out).
- A stream chunk that carries ``error`` (SGLang's and vLLM's way of ending a failing
  stream) is an ``answer_shape.UpstreamFailed`` with that error's status
  (``check_chunk``; 502 when it names none).
- An upstream that answered >= 400 is an ``UpstreamAnswered``: its status, and its
  message re-shaped into OpenAI's error object.
"""

from __future__ import annotations

from typing import Any

import httpx
import orjson

from ..errors import UpstreamError, UpstreamTimeout, error_body

__all__ = ["UpstreamAnswered", "transport_failure"]


class UpstreamAnswered(UpstreamError):
    """An upstream answered with an error status; ``body()`` keeps its message and type."""

    def __init__(self, status: int, content: bytes) -> None:
        message, self.upstream_type = _message(status, content)
        super().__init__(message, status_code=status)

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.upstream_type, code=self.status_code)


def transport_failure(exc: httpx.HTTPError, upstream: str | None) -> UpstreamError:
    """The failure a broken upstream read is (timeout: 504; anything else: 502)."""
    where = upstream or "an upstream"
    if isinstance(exc, httpx.TimeoutException):
        return UpstreamTimeout(f"upstream {where} timed out mid-stream")
    return UpstreamError(f"upstream {where} broke off the stream ({type(exc).__name__})")


def _message(status: int, content: bytes) -> tuple[str, str]:
    """An upstream error's message and type (SGLang's flat shape, OpenAI's, FastAPI's)."""
    try:
        data = orjson.loads(content)
    except orjson.JSONDecodeError:
        data = None
    message = None
    error_type = "upstream_error"
    if isinstance(data, dict):
        inner: dict[str, Any] = data["error"] if isinstance(data.get("error"), dict) else data
        message = inner.get("message") or inner.get("detail")
        error_type = str(inner.get("type") or error_type)
    if not isinstance(message, str):
        message = content.decode("utf-8", "replace")[:2000] or f"upstream answered {status}"
    return message, error_type
