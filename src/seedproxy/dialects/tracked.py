"""Kinds whose whole answers and stream chunks are read by one walk of OpenAI's chat and
completion shapes (``VLLMBackend``, ``OpenAIBackend``).

A kind that ``sends_token_ids`` (vLLM's ``return_token_ids``) gets them in
``choices[].token_ids`` (deltas when streaming) and the prompt's in
``prompt_token_ids`` (atop a chat answer or its first chunk; in each completion
choice). Otherwise a choice's ids are read only where the server spells every one of
its tokens as ``token_id:N`` (vLLM's ``return_tokens_as_token_ids``): a partial list
would misalign with the logprobs. What the client did not ask for is stripped.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

from ..sessions import ChoiceRecord
from ..wire.shapes import chat_logprobs, completion_logprobs, ints, wants
from ..wire.types import Captured, Endpoint, StreamCapture, UpstreamRequest
from .kind import Backend

__all__ = ["OpenAIBackend", "TrackedBackend", "Tracker", "VLLMBackend"]

_TOKEN_ID = re.compile(r"token_id:(\d+)")
_TRACKED = (Endpoint.CHAT, Endpoint.COMPLETIONS)


class TrackedBackend(Backend):
    sends_token_ids: ClassVar[bool] = False
    """Whether a capturing request gets the ids themselves (see the module docstring)."""

    def prepare(
        self, endpoint: Endpoint, body: dict[str, Any], seed: int | None, *, capture: bool
    ) -> UpstreamRequest:
        """``seed`` as OpenAI's ``seed`` (on Responses only where ``seeds_responses``);
        a capturing request asks for logprobs, and for the ids where ``sends_token_ids``."""
        if seed is not None and (endpoint is not Endpoint.RESPONSES or self.seeds_responses):
            body["seed"] = seed
        if capture and endpoint is Endpoint.CHAT:
            body.setdefault("logprobs", True)
        elif capture and endpoint is Endpoint.COMPLETIONS and body.get("logprobs") is None:
            body["logprobs"] = 1
        if capture and endpoint in _TRACKED and self.sends_token_ids:
            body["return_token_ids"] = True
        return UpstreamRequest(endpoint.value, body, dict(self._auth))

    def finish(
        self, endpoint: Endpoint, client_body: dict[str, Any], answer: Any
    ) -> tuple[Any, Captured]:
        if endpoint not in _TRACKED or not isinstance(answer, dict):
            return answer, Captured()
        tracker = Tracker(endpoint, client_body, ids=self.sends_token_ids)
        tracker.feed(answer)
        return answer, tracker.result()

    def stream_capture(self, endpoint: Endpoint, client_body: dict[str, Any]) -> StreamCapture:
        if endpoint not in _TRACKED:
            return super().stream_capture(endpoint, client_body)
        return Tracker(endpoint, client_body, ids=self.sends_token_ids)


class VLLMBackend(TrackedBackend):
    """vLLM: ``seed`` on chat, completions and responses (forwarded as is, nothing
    token-level captured there); token ids from ``return_token_ids``. Its ``/generate``
    is not SGLang's: such a request gets vLLM's own error. Seeds make vLLM bitwise
    reproducible only with batch invariance on (``VLLM_BATCH_INVARIANT=1``)."""

    name: ClassVar[str] = "vllm"
    seeds_responses: ClassVar[bool] = True
    sends_token_ids: ClassVar[bool] = True


class OpenAIBackend(TrackedBackend):
    """Any OpenAI-compatible server: OpenAI's ``seed`` (best effort, as OpenAI's own
    API calls it; none on its Responses API); captured from logprobs alone."""

    name: ClassVar[str] = "openai"


class Tracker:
    """One answer's or one stream's choices (stream ids are deltas, so both are the
    same walk). ``ids``: the choices carry token ids; ``spelled``: else read them from
    ``token_id:N`` tokens."""

    def __init__(self, endpoint: Endpoint, client_body: dict[str, Any], *, ids: bool,
                 spelled: bool = True) -> None:
        self._chat = endpoint is Endpoint.CHAT
        self._ids = ids
        self._spelled = spelled
        self._keep_ids = wants(client_body, "return_token_ids")
        self._keep_logprobs = (wants(client_body, "logprobs") if self._chat
                               else client_body.get("logprobs") is not None)
        self._prompt: list[int] = []
        self._choices: dict[int, ChoiceRecord] = {}
        self._tokens: dict[int, list[str]] = {}

    def feed(self, event: dict[str, Any]) -> dict[str, Any] | None:
        if self._ids and self._chat:
            self._take_prompt(event)
        for choice in event.get("choices") or []:
            if not isinstance(choice, dict):
                continue
            index = choice.get("index", 0)
            index = index if isinstance(index, int) else 0
            record = self._choices.setdefault(index, ChoiceRecord())
            record.logprobs.extend(
                chat_logprobs(choice) if self._chat else completion_logprobs(choice)
            )
            if choice.get("finish_reason"):
                record.finish_reason = choice["finish_reason"]
            if self._ids:
                record.token_ids.extend(ints(choice.get("token_ids")))
                if not self._chat:
                    self._take_prompt(choice)
                if not self._keep_ids:
                    choice.pop("token_ids", None)
            elif self._spelled:
                self._tokens.setdefault(index, []).extend(_tokens(choice, chat=self._chat))
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
        for index, record in self._choices.items():
            matches = [_TOKEN_ID.fullmatch(t) for t in self._tokens.get(index, [])]
            if matches and all(matches):
                record.token_ids.extend(ints([int(m.group(1)) for m in matches if m]))
        return Captured(self._prompt, [self._choices[i] for i in sorted(self._choices)])


def _tokens(choice: dict[str, Any], *, chat: bool) -> list[str]:
    block = choice.get("logprobs")
    if not isinstance(block, dict):
        return []
    if chat:
        return [str(t.get("token", "")) for t in block.get("content") or [] if isinstance(t, dict)]
    return [str(t) for t in block.get("tokens") or []]
