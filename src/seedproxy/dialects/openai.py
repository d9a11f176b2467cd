"""Any OpenAI-compatible server: the seed goes in OpenAI's ``seed`` field, and what is
captured comes from logprobs alone (``tracked.py``: such a server returns no token
ids). Whether the same seed gives the same tokens is up to that server: OpenAI's own
API calls ``seed`` best effort. OpenAI's Responses API has no ``seed``, so Responses
is not seeded directly (``seeds_responses`` is False).
"""

from __future__ import annotations

from typing import Any, ClassVar

from ..wire.types import Endpoint, UpstreamRequest
from .tracked import TrackedBackend

__all__ = ["OpenAIBackend"]


class OpenAIBackend(TrackedBackend):
    name: ClassVar[str] = "openai"

    def prepare(
        self, endpoint: Endpoint, body: dict[str, Any], seed: int | None, *, capture: bool
    ) -> UpstreamRequest:
        if seed is not None and endpoint is not Endpoint.RESPONSES:
            body["seed"] = seed
        if capture and endpoint is Endpoint.CHAT:
            body.setdefault("logprobs", True)
        elif capture and endpoint is Endpoint.COMPLETIONS and body.get("logprobs") is None:
            body["logprobs"] = 1
        return UpstreamRequest(endpoint.value, body, dict(self._auth))
