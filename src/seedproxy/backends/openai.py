"""Any OpenAI-compatible server: the seed goes in OpenAI's ``seed`` field, and what is
captured comes from logprobs alone.

Such a server returns no token ids, so each choice records its sampled tokens'
logprobs; token ids are recorded only where the server spells tokens as
``token_id:N`` (vLLM's ``return_tokens_as_token_ids``), and only when every token
of the choice is spelled so (a partial list would misalign with the logprobs).
Whether the same seed gives the same tokens is up to that server: OpenAI's own API
calls ``seed`` best effort. OpenAI's Responses API has no ``seed``, so Responses is
not seeded directly (``seeds_responses`` is False).
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

from ..sessions import ChoiceRecord
from .base import Captured, Endpoint, StreamCapture, UpstreamRequest
from .kind import TrackedBackend
from .shapes import chat_logprobs, completion_logprobs, ints, wants

__all__ = ["OpenAIBackend"]

_TOKEN_ID = re.compile(r"token_id:(\d+)")


class OpenAIBackend(TrackedBackend):
    name: ClassVar[str] = "openai"
    seeds_responses: ClassVar[bool] = False

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

    def tracker(self, endpoint: Endpoint, client_body: dict[str, Any]) -> StreamCapture:
        return _Tracker(endpoint, client_body)


class _Tracker:
    """Logprobs (and ``token_id:N`` tokens) per choice, from an answer or its chunks."""

    def __init__(self, endpoint: Endpoint, client_body: dict[str, Any]) -> None:
        self._chat = endpoint is Endpoint.CHAT
        if self._chat:
            self._keep_logprobs = wants(client_body, "logprobs")
        else:
            self._keep_logprobs = client_body.get("logprobs") is not None
        self._choices: dict[int, ChoiceRecord] = {}
        self._tokens: dict[int, list[str]] = {}

    def feed(self, event: dict[str, Any]) -> dict[str, Any] | None:
        for choice in event.get("choices") or []:
            if not isinstance(choice, dict):
                continue
            index = choice.get("index", 0)
            index = index if isinstance(index, int) else 0
            record = self._choices.setdefault(index, ChoiceRecord())
            if self._chat:
                record.logprobs.extend(chat_logprobs(choice))
            else:
                record.logprobs.extend(completion_logprobs(choice))
            self._tokens.setdefault(index, []).extend(_tokens(choice, chat=self._chat))
            if choice.get("finish_reason"):
                record.finish_reason = choice["finish_reason"]
            if not self._keep_logprobs and choice.get("logprobs") is not None:
                choice["logprobs"] = None
        return event

    def result(self) -> Captured:
        choices = []
        for index in sorted(self._choices):
            record = self._choices[index]
            matches = [_TOKEN_ID.fullmatch(t) for t in self._tokens.get(index, [])]
            if matches and all(matches):
                record.token_ids.extend(ints([int(m.group(1)) for m in matches if m]))
            choices.append(record)
        return Captured([], choices)


def _tokens(choice: dict[str, Any], *, chat: bool) -> list[str]:
    block = choice.get("logprobs")
    if not isinstance(block, dict):
        return []
    if chat:
        return [str(t.get("token", "")) for t in block.get("content") or [] if isinstance(t, dict)]
    return [str(t) for t in block.get("tokens") or []]
