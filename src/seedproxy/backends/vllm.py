"""vLLM: ``seed`` on chat, completions and responses; token ids from
``return_token_ids``.

Where vLLM puts the ids (``vllm/entrypoints/openai/*/protocol.py``):
- chat: ``prompt_token_ids`` at the top of the answer (of the first chunk when
  streaming) and ``choices[].token_ids`` (per-chunk deltas when streaming);
- completions: ``choices[].prompt_token_ids`` and ``choices[].token_ids``, the same
  way in both modes.
vLLM's Responses API honours ``seed`` itself, so Responses is forwarded as is; it has
no token-id flag, so nothing token-level is captured there. vLLM has no ``/generate``
in SGLang's shape: such a request is forwarded and vLLM's own error comes back.
Seeds only make vLLM bitwise reproducible with batch invariance on
(``VLLM_BATCH_INVARIANT=1``).
"""

from __future__ import annotations

from typing import Any, ClassVar

from ..sessions import ChoiceRecord
from .base import Captured, Endpoint, StreamCapture, UpstreamRequest
from .kind import TrackedBackend
from .shapes import chat_logprobs, completion_logprobs, ints, wants

__all__ = ["VLLMBackend"]


class VLLMBackend(TrackedBackend):
    name: ClassVar[str] = "vllm"
    seeds_responses: ClassVar[bool] = True

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

    def tracker(self, endpoint: Endpoint, client_body: dict[str, Any]) -> StreamCapture:
        return _Tracker(endpoint, client_body)


class _Tracker:
    """Reads ids and logprobs from a whole answer or from each chunk of a stream
    (vLLM's stream ids are deltas, so both are the same walk), and strips what the
    client did not ask for."""

    def __init__(self, endpoint: Endpoint, client_body: dict[str, Any]) -> None:
        self._chat = endpoint is Endpoint.CHAT
        self._keep_ids = wants(client_body, "return_token_ids")
        if self._chat:
            self._keep_logprobs = wants(client_body, "logprobs")
        else:
            self._keep_logprobs = client_body.get("logprobs") is not None
        self._prompt: list[int] = []
        self._choices: dict[int, ChoiceRecord] = {}

    def feed(self, event: dict[str, Any]) -> dict[str, Any] | None:
        if self._chat:
            self._take_prompt(event)
        for choice in event.get("choices") or []:
            if not isinstance(choice, dict):
                continue
            index = choice.get("index", 0)
            record = self._choices.setdefault(
                index if isinstance(index, int) else 0, ChoiceRecord()
            )
            record.token_ids.extend(ints(choice.get("token_ids")))
            record.logprobs.extend(
                chat_logprobs(choice) if self._chat else completion_logprobs(choice)
            )
            if choice.get("finish_reason"):
                record.finish_reason = choice["finish_reason"]
            if not self._chat:
                self._take_prompt(choice)
            if not self._keep_ids:
                choice.pop("token_ids", None)
            if not self._keep_logprobs and choice.get("logprobs") is not None:
                choice["logprobs"] = None
        return event

    def _take_prompt(self, holder: dict[str, Any]) -> None:
        ids = holder.get("prompt_token_ids")
        if ids and not self._prompt:
            self._prompt = ints(ids)
        if not self._keep_ids:
            holder.pop("prompt_token_ids", None)

    def result(self) -> Captured:
        return Captured(self._prompt, [self._choices[i] for i in sorted(self._choices)])
