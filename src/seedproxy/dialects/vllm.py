"""vLLM: ``seed`` on chat, completions and responses; token ids from
``return_token_ids`` (``vllm/entrypoints/openai/*/protocol.py``), read as
``tracked.py`` says.

vLLM's Responses API honours ``seed`` itself, so Responses is forwarded as is; it has
no token-id flag, so nothing token-level is captured there. vLLM has no ``/generate``
in SGLang's shape: such a request is forwarded and vLLM's own error comes back.
Seeds only make vLLM bitwise reproducible with batch invariance on
(``VLLM_BATCH_INVARIANT=1``).
"""

from __future__ import annotations

from typing import Any, ClassVar

from ..wire.types import Endpoint, UpstreamRequest
from .tracked import TrackedBackend

__all__ = ["VLLMBackend"]


class VLLMBackend(TrackedBackend):
    name: ClassVar[str] = "vllm"
    seeds_responses: ClassVar[bool] = True
    sends_token_ids: ClassVar[bool] = True

    def prepare(
        self, endpoint: Endpoint, body: dict[str, Any], seed: int | None, *, capture: bool
    ) -> UpstreamRequest:
        if seed is not None:
            body["seed"] = seed
        if capture and endpoint is Endpoint.CHAT:
            body.setdefault("logprobs", True)
            body["return_token_ids"] = True
        elif capture and endpoint is Endpoint.COMPLETIONS:
            if body.get("logprobs") is None:
                body["logprobs"] = 1
            body["return_token_ids"] = True
        return UpstreamRequest(endpoint.value, body, dict(self._auth))
