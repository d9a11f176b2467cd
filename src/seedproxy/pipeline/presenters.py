"""The client side of a request: one ``Presenter`` per client protocol.

A presenter owns its protocol's whole answer, its stream events (a ``Writer`` fed each
canonical chunk a reader yields) and its terminator; its ``errors``
(``error_presenters``) build its error bodies, answers and events. Readers
yield OpenAI chunks (chat, completions, or ``/generate`` items); the OpenAI presenter
shows them as they are, the Responses and Messages presenters translate chat chunks.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

from ..bridges.anthropic_events import MessageEvents, to_message
from ..bridges.responses_events import ResponsesEvents, to_response
from ..dialects import Endpoint
from ..error_presenters import ANTHROPIC, OPENAI, RESPONSES, ErrorPresenter
from ..errors import SeedProxyError
from ..sse_frames import DONE, data_frame, typed_frame

__all__ = ["MessagesPresenter", "OpenAIPresenter", "Presenter", "ResponsesPresenter", "Writer"]

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
    """A protocol's answer and stream shapes; ``errors``: its error presenter."""

    errors: ErrorPresenter = OPENAI

    def whole(self, answer: Any) -> Any:
        return answer

    def writer(self) -> Writer:
        raise NotImplementedError


class OpenAIPresenter(Presenter):
    """Chat, completions and ``/generate``: chunks shown as they are, ``[DONE]`` last."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint

    def writer(self) -> Writer:
        return StreamTranscript(self.endpoint)


class ResponsesPresenter(Presenter):
    """OpenAI Responses, from chat answers and chunks."""

    errors = RESPONSES

    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body

    def whole(self, answer: Any) -> Any:
        return to_response(self.body, answer, int(time.time()))

    def writer(self) -> Writer:
        events = ResponsesEvents(self.body, time.time)
        return _Translating(events,
                            lambda exc: typed_frame(events.error(RESPONSES.body(exc)["error"])))


class MessagesPresenter(Presenter):
    """Anthropic Messages, from chat answers and chunks; errors in Anthropic's shape."""

    errors = ANTHROPIC

    def __init__(self, body: dict[str, Any], seed: int | None) -> None:
        self.body = body
        self.seed = seed

    def whole(self, answer: Any) -> Any:
        return to_message(self.body, answer, self.seed)

    def writer(self) -> Writer:
        return _Translating(MessageEvents(self.body, self.seed), ANTHROPIC.event)


class _Translating:
    """A writer over a protocol's event builder, each event a typed SSE frame; ``error``
    builds the failed stream's last event."""

    def __init__(self, events: ResponsesEvents | MessageEvents,
                 error: Callable[[SeedProxyError], bytes]) -> None:
        self._events = events
        self.error = error

    def feed(self, chunk: Chunk) -> list[bytes]:
        assert isinstance(chunk, dict), "translated streams are always parsed"
        return [typed_frame(out) for out in self._events.feed(chunk)]

    def finish(self) -> list[bytes]:
        return [typed_frame(out) for out in self._events.finish()]

    def result(self) -> Any:
        return self._events.result()


class StreamTranscript:
    """The OpenAI writer. Its record concatenates per-choice text (and tool-call
    fragments): ``{"object": "stream", "choices": [...], "usage": ...}``. A Responses
    stream (passed as an upstream sent it) records the last Responses object its
    events carried: the ``response.completed`` one when it ended well; ``/generate``
    its last item."""

    def __init__(self, endpoint: Endpoint) -> None:
        self._endpoint = endpoint
        self._text: dict[int, list[str]] = {}
        self._finish: dict[int, Any] = {}
        self._tools: dict[int, list[Any]] = {}
        self._usage: Any = None
        self._last: Any = None

    def feed(self, chunk: Chunk) -> list[bytes]:
        if isinstance(chunk, bytes):
            return [chunk]
        endpoint = self._endpoint
        if endpoint is Endpoint.GENERATE:
            self._last = chunk
        elif endpoint is Endpoint.RESPONSES:
            if isinstance(chunk.get("response"), dict):
                self._last = chunk["response"]
        else:
            if chunk.get("usage") is not None:
                self._usage = chunk["usage"]
            for choice in chunk.get("choices") or []:
                if not isinstance(choice, dict):
                    continue
                index = choice.get("index", 0)
                delta = choice.get("delta") if endpoint is Endpoint.CHAT else choice
                if isinstance(delta, dict):
                    piece = delta.get("content" if endpoint is Endpoint.CHAT else "text")
                    if isinstance(piece, str):
                        self._text.setdefault(index, []).append(piece)
                    if delta.get("tool_calls"):
                        self._tools.setdefault(index, []).extend(delta["tool_calls"])
                if choice.get("finish_reason") is not None:
                    self._finish[index] = choice["finish_reason"]
        return [data_frame(chunk)]

    def finish(self) -> list[bytes]:
        return [DONE]

    def error(self, exc: SeedProxyError) -> bytes:
        return OPENAI.event(exc)

    def result(self) -> Any:
        if self._endpoint in (Endpoint.GENERATE, Endpoint.RESPONSES):
            return self._last
        choices = []
        for i in sorted(set(self._text) | set(self._finish) | set(self._tools)):
            choice: dict[str, Any] = {"index": i, "text": "".join(self._text.get(i, [])),
                                      "finish_reason": self._finish.get(i)}
            if i in self._tools:
                choice["tool_calls"] = self._tools[i]
            choices.append(choice)
        return {"object": "stream", "choices": choices, "usage": self._usage}
