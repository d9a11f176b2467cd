"""The client side of an exchange: one ``Presenter`` per client protocol.

A presenter owns its protocol's whole answer, its stream events (a ``Writer`` fed each
canonical chunk a reader yields), its terminator, its error body and its error event,
each encoded in one place. Readers yield OpenAI chunks (chat, completions, or
``/generate`` items); the OpenAI presenter shows them as they are, the Responses and
Messages presenters translate chat chunks.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import orjson
from starlette.responses import Response

from ..backends import Endpoint
from ..backends.anthropic_bridge import anthropic_error, to_message
from ..backends.anthropic_events import MessageEvents
from ..backends.responses_bridge import error_object, to_response
from ..backends.responses_events import ResponsesEvents
from ..errors import SeedProxyError, StoreError, UpstreamError
from ..sse_frames import DONE, data_frame, typed_frame
from .transcript import StreamTranscript

__all__ = [
    "MessagesPresenter",
    "OpenAIPresenter",
    "Presenter",
    "ResponsesPresenter",
    "Writer",
]

log = logging.getLogger("seedproxy.request")

Chunk = dict[str, Any] | bytes
"""A canonical chunk, or (outside sessions, OpenAI routes) an upstream event as sent."""


class Writer(Protocol):
    """One stream's events in the client's protocol."""

    def feed(self, chunk: Chunk) -> list[bytes]: ...

    def finish(self) -> list[bytes]:
        """The closing events of a stream that succeeded (its terminator last)."""

    def result(self) -> Any:
        """What the client was shown so far, as recorded."""

    def error(self, exc: SeedProxyError) -> bytes:
        """The event that ends a failed stream in place of the terminator."""


class Presenter:
    """OpenAI's error shapes; subclasses add their answer and stream shapes."""

    def whole(self, answer: Any) -> Any:
        return answer

    def writer(self) -> Writer:
        raise NotImplementedError

    def error_body(self, exc: SeedProxyError) -> dict[str, Any]:
        return exc.body()

    def error_response(self, exc: SeedProxyError, headers: Mapping[str, str]) -> Response:
        """The error answer (``retry-after`` where waiting helps); seedproxy's own 5xx
        are logged here."""
        out = dict(headers)
        if exc.retry_after_s is not None:
            out["retry-after"] = str(exc.retry_after_s)
        if exc.status_code >= 500 and not isinstance(exc, UpstreamError | StoreError):
            log.error("internal error: %s", exc.message)
        return Response(orjson.dumps(self.error_body(exc)), exc.status_code, headers=out,
                        media_type="application/json")


class OpenAIPresenter(Presenter):
    """Chat, completions and ``/generate``: chunks shown as they are, ``[DONE]`` last."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint

    def writer(self) -> Writer:
        return _OpenAIWriter(self.endpoint)


class _OpenAIWriter:
    def __init__(self, endpoint: Endpoint) -> None:
        self._transcript = StreamTranscript(endpoint)

    def feed(self, chunk: Chunk) -> list[bytes]:
        if isinstance(chunk, bytes):
            return [chunk]
        self._transcript.add(chunk)
        return [data_frame(chunk)]

    def finish(self) -> list[bytes]:
        return [DONE]

    def result(self) -> Any:
        return self._transcript.result()

    def error(self, exc: SeedProxyError) -> bytes:
        return data_frame(exc.body())


class ResponsesPresenter(Presenter):
    """OpenAI Responses, from chat answers and chunks; ``clock`` (Unix seconds) dates
    ``completed_at``."""

    def __init__(self, body: dict[str, Any], clock: Callable[[], float] = time.time) -> None:
        self.body = body
        self.clock = clock

    def whole(self, answer: Any) -> Any:
        return to_response(self.body, answer, int(self.clock()))

    def error_body(self, exc: SeedProxyError) -> dict[str, Any]:
        return {"error": error_object(exc.body()["error"])}

    def writer(self) -> Writer:
        events = ResponsesEvents(self.body, self.clock)
        return _Translating(events, typed_frame,
                            lambda exc: typed_frame(events.error(exc.body()["error"])))


class MessagesPresenter(Presenter):
    """Anthropic Messages, from chat answers and chunks; errors in Anthropic's shape."""

    def __init__(self, body: dict[str, Any], seed: int | None) -> None:
        self.body = body
        self.seed = seed

    def whole(self, answer: Any) -> Any:
        return to_message(self.body, answer, self.seed)

    def writer(self) -> Writer:
        return _Translating(MessageEvents(self.body, self.seed), typed_frame,
                            lambda exc: typed_frame(self.error_body(exc)))

    def error_body(self, exc: SeedProxyError) -> dict[str, Any]:
        return anthropic_error(exc.status_code, exc.message)


class _Events(Protocol):
    def feed(self, chunk: dict[str, Any]) -> list[dict[str, Any]]: ...

    def finish(self) -> list[dict[str, Any]]: ...

    def result(self) -> Any: ...


class _Translating:
    """A writer over a protocol's event builder and its SSE encoder."""

    def __init__(self, events: _Events, encode: Any, error: Any) -> None:
        self._events = events
        self._encode = encode
        self._error = error

    def feed(self, chunk: Chunk) -> list[bytes]:
        assert isinstance(chunk, dict), "translated streams are always parsed"
        return [self._encode(out) for out in self._events.feed(chunk)]

    def finish(self) -> list[bytes]:
        return [self._encode(out) for out in self._events.finish()]

    def result(self) -> Any:
        return self._events.result()

    def error(self, exc: SeedProxyError) -> bytes:
        return bytes(self._error(exc))
