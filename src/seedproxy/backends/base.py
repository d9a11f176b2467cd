"""The interface every upstream dialect implements.

A backend is a pure translator: it rewrites a client's body for its upstream (seed
placement, token-id capture flags) and rewrites the upstream's answer back into what
the client asked for, keeping the captured token ids aside. It does no I/O; sending
is ``UpstreamPool``'s job. Adding a dialect means adding one module and one entry
in ``BACKENDS``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar, Protocol

from ..sessions import ChoiceRecord
from ..sessions.token_ids import TokenIds

__all__ = [
    "Backend",
    "Captured",
    "Endpoint",
    "OPENAI_ENDPOINTS",
    "StreamCapture",
    "TrackedBackend",
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


class Backend:
    """Base dialect: forwards OpenAI's ``seed`` and captures nothing."""

    name: ClassVar[str] = "base"
    seeds_responses: ClassVar[bool] = False
    """Whether the upstream's own /v1/responses honours ``seed``. When False the proxy
    serves Responses by translating to a chat completion."""
    echoes_prompt: ClassVar[bool] = False
    """Whether a captured whole chat answer echoes the prompt's ids in its choices
    (``prompt_token_ids``), read past a known prefix by ``echo.py``."""

    def __init__(self, *, api_key: str | None = None, routed_experts: bool = False) -> None:
        """``routed_experts``: ask for MoE routing where the dialect can return it."""
        self._auth = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self.routed_experts = routed_experts

    def prepare(
        self, endpoint: Endpoint, body: dict[str, Any], seed: int | None, *, capture: bool
    ) -> UpstreamRequest:
        """Return the upstream request for ``body`` (already a private copy) with
        ``seed`` placed where this upstream honours it (None: leave the body's own)."""
        if seed is not None:
            body["seed"] = seed
        return UpstreamRequest(endpoint.value, body, dict(self._auth))

    def finish(
        self, endpoint: Endpoint, client_body: dict[str, Any], answer: Any
    ) -> tuple[Any, Captured]:
        """Split a non-streaming answer into (what the client sees, what is captured)."""
        return answer, Captured()

    def stream_capture(self, endpoint: Endpoint, client_body: dict[str, Any]) -> StreamCapture:
        return _PassThrough()


class TrackedBackend(Backend):
    """A dialect whose whole answers and stream chunks are read by the same walk (ids
    and logprobs per choice, as vLLM and OpenAI-compatible servers send them)."""

    tracked: ClassVar[tuple[Endpoint, ...]] = (Endpoint.CHAT, Endpoint.COMPLETIONS)

    def tracker(self, endpoint: Endpoint, client_body: dict[str, Any]) -> StreamCapture:
        raise NotImplementedError

    def finish(
        self, endpoint: Endpoint, client_body: dict[str, Any], answer: Any
    ) -> tuple[Any, Captured]:
        if endpoint not in self.tracked or not isinstance(answer, dict):
            return answer, Captured()
        tracker = self.tracker(endpoint, client_body)
        tracker.feed(answer)
        return answer, tracker.result()

    def stream_capture(self, endpoint: Endpoint, client_body: dict[str, Any]) -> StreamCapture:
        if endpoint not in self.tracked:
            return super().stream_capture(endpoint, client_body)
        return self.tracker(endpoint, client_body)


class _PassThrough:
    def feed(self, event: dict[str, Any]) -> dict[str, Any] | None:
        return event

    def result(self) -> Captured:
        return Captured()
