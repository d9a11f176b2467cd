"""One class per upstream kind (``--backend``), holding all that tells kinds apart.

A kind is a pure translator (no I/O): a client's body for its upstream (seed
placement, token-id capture flags), and the upstream's answer back as the client asked
for it, the captured token ids kept aside. Its class attributes say what else the
upstream offers; callers ask them, never a kind's name.
"""

from __future__ import annotations

from typing import Any, ClassVar

from ..tito.dialect import CompletionsDialect, Dialect
from ..wire.types import Captured, Endpoint, StreamCapture, UpstreamRequest

__all__ = ["Backend"]


class Backend:
    """Base kind: forwards OpenAI's ``seed`` and captures nothing."""

    name: ClassVar[str] = "base"
    seeds_responses: ClassVar[bool] = False
    """Whether the upstream's own /v1/responses honours ``seed``. When False the proxy
    serves Responses by translating to a chat completion."""
    echoes_prompt: ClassVar[bool] = False
    """Whether a captured whole chat answer echoes the prompt's ids in its choices
    (``prompt_token_ids``), read past a known prefix by ``echo.py``."""
    reports_server_info: ClassVar[bool] = False
    """Whether the upstream answers SGLang's ``/get_server_info``: the fleet reads it for
    the determinism preflight (``preflight.py``) and the weight version, and a joining
    server must pass both (``fleet/server_report.py``'s ``join_refusal``)."""
    names_requests: ClassVar[bool] = False
    """Whether the upstream takes a request id (``rid``) and aborts a request by it
    (``/abort_request``): each request sent is then named."""
    token_dialect: ClassVar[type[Dialect]] = CompletionsDialect
    """How a token-in-token-out prompt is sent and its ids read (``tito/dialect.py``)."""

    def __init__(self, *, api_key: str | None = None, routed_experts: bool = False) -> None:
        """``routed_experts``: ask for MoE routing where the kind can return it."""
        self._auth = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self.routed_experts = routed_experts

    def tito(self) -> Dialect:
        """The token-in-token-out dialect, with this kind's upstream key."""
        return self.token_dialect(dict(self._auth))

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


class _PassThrough:
    def feed(self, event: dict[str, Any]) -> dict[str, Any] | None:
        return event

    def result(self) -> Captured:
        return Captured()
