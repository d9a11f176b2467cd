"""What a request and an answer are to every upstream kind (``kind.py``): the routes
(``Endpoint``), the request sent upstream, the token-level data captured from an
answer and the stream reader that captures it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from ..sessions import ChoiceRecord
from ..sessions.token_ids import TokenIds

__all__ = [
    "Captured",
    "Endpoint",
    "OPENAI_ENDPOINTS",
    "StreamCapture",
    "UpstreamRequest",
]


class Endpoint(StrEnum):
    CHAT = "/v1/chat/completions"
    COMPLETIONS = "/v1/completions"
    RESPONSES = "/v1/responses"
    GENERATE = "/generate"
    MESSAGES = "/v1/messages"
    """Anthropic's Messages API: served as a chat completion (``pipeline/admission.py``)."""


OPENAI_ENDPOINTS = tuple(e for e in Endpoint if e is not Endpoint.MESSAGES)
"""The routes answered in OpenAI's shapes (and errors)."""


@dataclass(slots=True)
class UpstreamRequest:
    path: str
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)
    echo: TokenIds | None = None
    """Ids the answer's echoed prompt likely starts with (``echo.py``); only a hint."""
    echoes: bool = False
    """The backend reads this answer's echoed prompt ids as a ``TokenIds`` as well as
    a list (a large answer's then come back packed: ``pipeline/parse_jobs.py``)."""


@dataclass(slots=True)
class Captured:
    """Token-level data the proxy keeps for training, per choice in choice order."""

    prompt_token_ids: Sequence[int] = field(default_factory=list)
    """A list, or an ``array('i')`` (kept as is when recorded)."""
    choices: list[ChoiceRecord] = field(default_factory=list)
    lineage: dict[str, Any] | None = None
    """Token-in-token-out: which earlier turn this prompt extends (its matching keys)."""


class StreamCapture(Protocol):
    def feed(self, event: dict[str, Any]) -> dict[str, Any] | None:
        """Take one parsed SSE event; return it as the client should see it (the same
        object when unchanged) or None to drop it."""

    def result(self) -> Captured:
        """Return what the events carried, once the stream has ended."""
