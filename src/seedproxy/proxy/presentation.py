"""How a chat answer is shown to a client that spoke another protocol.

Token-in-token-out mode builds chat answers itself; a Responses or Messages client gets
them translated. One ``Presentation`` says how: the whole answer, the stream's events
(a writer fed each chat chunk), their encoding, and an error event. Chat itself needs
none (``None``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from ..backends.anthropic_bridge import anthropic_error, to_message
from ..backends.anthropic_events import MessageEvents, sse
from ..backends.responses_bridge import dumps, to_response
from ..backends.responses_events import ResponsesEvents
from ..errors import SeedProxyError

__all__ = ["EventWriter", "Presentation", "messages_presentation", "responses_presentation"]


class EventWriter(Protocol):
    def feed(self, chunk: dict[str, Any]) -> list[dict[str, Any]]: ...

    def finish(self) -> list[dict[str, Any]]: ...

    def result(self) -> Any: ...


@dataclass(frozen=True, slots=True)
class Presentation:
    whole: Callable[[dict[str, Any]], Any]
    """A whole chat answer as the client's protocol shows it."""
    events: Callable[[], EventWriter]
    """A new writer for one stream."""
    encode: Callable[[dict[str, Any]], bytes]
    """One stream event on the wire."""
    error: Callable[[SeedProxyError], bytes]
    """An error event that ends a stream."""


def responses_presentation(body: dict[str, Any]) -> Presentation:
    return Presentation(
        whole=lambda answer: to_response(body, answer),
        events=lambda: ResponsesEvents(body),
        encode=dumps,
        error=lambda exc: b"event: error\ndata: " + orjson.dumps(exc.body()) + b"\n\n",
    )


def messages_presentation(body: dict[str, Any], seed: int | None) -> Presentation:
    return Presentation(
        whole=lambda answer: to_message(body, answer, seed),
        events=lambda: MessageEvents(body, seed),
        encode=sse,
        error=lambda exc: sse(anthropic_error(exc.status_code, exc.message)),
    )
