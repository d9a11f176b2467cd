"""One error presenter per client protocol: every error body, in-stream error event and
error answer is built here from the error table (``errors``), a 5xx of seedproxy's own
(``logged``) logged here once. The Messages routes (``MESSAGES_PATHS``, also under
``/sessions/{id}``) answer in Anthropic's shape, every other route in OpenAI's.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import orjson
from starlette.responses import Response

from .errors import SeedProxyError, anthropic_type, error_body
from .sse_frames import data_frame, typed_frame

__all__ = ["ANTHROPIC", "MESSAGES_PATHS", "OPENAI", "RESPONSES", "ErrorPresenter", "errors_for",
           "unexpected"]

log = logging.getLogger("seedproxy.request")
bugs = logging.getLogger("seedproxy")

MESSAGES_PATHS = ("/v1/messages", "/v1/messages/count_tokens")


class ErrorPresenter:
    """OpenAI's error shapes: ``{"error": {message, type, param, code}}``, in a stream as
    one ``data:`` chunk."""

    def body(self, exc: SeedProxyError) -> dict[str, Any]:
        return exc.body()

    def event(self, exc: SeedProxyError) -> bytes:
        """The event that ends a failed stream in place of its terminator."""
        return data_frame(self.body(exc))

    def response(self, exc: SeedProxyError, headers: Mapping[str, str] | None = None
                 ) -> Response:
        out = dict(headers or {})
        if exc.retry_after_s is not None:
            out["retry-after"] = str(exc.retry_after_s)
        if exc.status_code >= 500 and exc.logged:
            log.error("internal error: %s", exc.message)
        return _json(self.body(exc), exc.status_code, out)


class AnthropicErrors(ErrorPresenter):
    """Anthropic's: ``{"type": "error", "error": {type, message}}``, in a stream as an
    ``error`` event."""

    def body(self, exc: SeedProxyError) -> dict[str, Any]:
        kind = anthropic_type(exc.status_code)
        return {"type": "error", "error": {"type": kind, "message": exc.message}}

    def event(self, exc: SeedProxyError) -> bytes:
        return typed_frame(self.body(exc))


class ResponsesErrors(ErrorPresenter):
    """OpenAI's, with the types the Responses schema gives the fields (``code`` a
    string); its stream's error event is ``ResponsesEvents.error`` of this body's
    ``error``, numbered in its stream."""

    def body(self, exc: SeedProxyError) -> dict[str, Any]:
        return error_body(exc.message, exc.error_type, param=exc.param,
                          code=None if exc.code is None else str(exc.code))


OPENAI = ErrorPresenter()
RESPONSES = ResponsesErrors()
ANTHROPIC = AnthropicErrors()


def errors_for(path: str) -> ErrorPresenter:
    return ANTHROPIC if path.endswith(MESSAGES_PATHS) else OPENAI


def unexpected(path: str) -> Response:
    """seedproxy's own bug on ``path`` (called in its ``except``): logged with its
    traceback, answered 500 in the route's protocol."""
    bugs.exception("unexpected error on %s", path)
    return _json(errors_for(path).body(SeedProxyError("internal error")), 500, {})


def _json(body: dict[str, Any], status: int, headers: dict[str, str]) -> Response:
    return Response(orjson.dumps(body), status, headers=headers, media_type="application/json")
