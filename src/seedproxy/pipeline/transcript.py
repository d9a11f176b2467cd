"""What a streamed answer said, assembled from its events for the recorded interaction."""

from __future__ import annotations

from typing import Any

from ..dialects import Endpoint

__all__ = ["StreamTranscript"]


class StreamTranscript:
    """Concatenates per-choice text (and tool-call fragments) from SSE events.

    The record keeps ``{"object": "stream", "choices": [...], "usage": ...}``; the
    client saw the same content split across events. A Responses stream (passed as an
    upstream sent it) records the last Responses object its events carried: the
    ``response.completed`` one when it ended well.
    """

    def __init__(self, endpoint: Endpoint) -> None:
        self._endpoint = endpoint
        self._text: dict[int, list[str]] = {}
        self._finish: dict[int, Any] = {}
        self._tools: dict[int, list[Any]] = {}
        self._usage: Any = None
        self._last: Any = None

    def add(self, event: Any) -> None:
        if not isinstance(event, dict):
            return
        if self._endpoint is Endpoint.GENERATE:
            self._last = event
            return
        if self._endpoint is Endpoint.RESPONSES:
            if isinstance(event.get("response"), dict):
                self._last = event["response"]
            return
        if event.get("usage") is not None:
            self._usage = event["usage"]
        for choice in event.get("choices") or []:
            if not isinstance(choice, dict):
                continue
            index = choice.get("index", 0)
            delta = choice.get("delta") if self._endpoint is Endpoint.CHAT else choice
            if isinstance(delta, dict):
                piece = (
                    delta.get("content") if self._endpoint is Endpoint.CHAT else delta.get("text")
                )
                if isinstance(piece, str):
                    self._text.setdefault(index, []).append(piece)
                if delta.get("tool_calls"):
                    self._tools.setdefault(index, []).extend(delta["tool_calls"])
            if choice.get("finish_reason") is not None:
                self._finish[index] = choice["finish_reason"]

    def result(self) -> Any:
        if self._endpoint in (Endpoint.GENERATE, Endpoint.RESPONSES):
            return self._last
        indices = sorted(set(self._text) | set(self._finish) | set(self._tools))
        choices = []
        for i in indices:
            choice: dict[str, Any] = {
                "index": i,
                "text": "".join(self._text.get(i, [])),
                "finish_reason": self._finish.get(i),
            }
            if i in self._tools:
                choice["tool_calls"] = self._tools[i]
            choices.append(choice)
        return {"object": "stream", "choices": choices, "usage": self._usage}
