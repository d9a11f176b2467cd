"""How a chat answer is shown to a client that spoke another protocol.

Token-in-token-out mode builds chat answers itself; a Responses or Messages client gets
them translated. One ``Presentation`` says how: the whole answer, the stream's events
(a writer fed each chat chunk), their encoding, and an error event. Chat itself needs
none (``None``).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import httpx
import orjson

from ..backends import Endpoint
from ..backends.answer_shape import MalformedAnswer, check_chunk
from ..backends.anthropic_bridge import anthropic_error, to_message
from ..backends.anthropic_events import MessageEvents, sse
from ..backends.responses_bridge import dumps, to_response
from ..backends.responses_events import ResponsesEvents
from ..errors import SeedProxyError, UpstreamError
from .sse import DONE, event_json, split_events
from .stream import StreamRecord

__all__ = [
    "EventWriter",
    "Presentation",
    "messages_presentation",
    "responses_presentation",
    "translated_events",
]

log = logging.getLogger("seedproxy.request")


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


async def translated_events(
    chunks: AsyncIterator[bytes], *, upstream: str, max_event_bytes: int,
    record: StreamRecord, tracker: Any, writer: EventWriter, present: Presentation,
) -> AsyncIterator[bytes]:
    """An upstream chat stream shown in another protocol: each chunk checked, captured
    and translated as it arrives; recorded before the closing events."""
    try:
        async for event in split_events(chunks, max_event_bytes):
            if event.strip() == DONE.strip():
                break
            payload = event_json(event)
            if payload is None:
                continue
            check_chunk(Endpoint.CHAT, payload)
            shown = tracker.feed(payload) if tracker is not None else payload
            if shown is not None:
                for out in writer.feed(shown):
                    yield present.encode(out)
        closing = writer.finish()
        unrecorded = await record.seal()  # recorded before the client sees the end
        if unrecorded is not None:
            yield present.error(unrecorded)
            return
        for out in closing:
            yield present.encode(out)
    except httpx.HTTPError as exc:
        record.status = 502
        log.warning("upstream %s broke off a stream: %s", upstream, type(exc).__name__)
        yield present.error(UpstreamError(f"upstream {upstream} broke off the stream"))
    except MalformedAnswer as exc:
        record.status = exc.status_code
        log.warning("upstream %s sent a malformed chunk: %s", upstream, exc.message)
        yield present.error(exc)
    except Exception:
        record.status = 500  # seedproxy's own bug: recorded as such, and raised
        raise
