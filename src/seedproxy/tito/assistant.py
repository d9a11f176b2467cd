"""Sampled token ids -> an OpenAI assistant message, token by token.

``AssistantStream`` chains the decoder, the reasoning parser and the tool parser.
``feed`` returns the deltas a stream shows for one token, ``finish`` the last ones
and the tool calls. A whole answer is built by the same calls, so a streamed answer
and a whole one are the same message.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..detokenize import IncrementalDecoder
from ..stop_strings import StopTrim
from .markers import MarkerGuard
from .reasoning import Held, ReasoningParser
from .tool_parsers import ToolCall, ToolParser
from .tools.base import openai_call_id

__all__ = ["AssistantStream", "Delta", "Reply"]


@dataclass(frozen=True, slots=True)
class Delta:
    kind: str  # ``content`` or ``reasoning_content``
    text: str


@dataclass(slots=True)
class Reply:
    """A finished assistant message."""

    content: str = ""
    reasoning: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)

    def message(self, call_ids: list[str]) -> dict[str, Any]:
        message: dict[str, Any] = {
            "role": "assistant",
            "content": self.content if self.content or not self.tool_calls else None,
        }
        if self.reasoning:
            message["reasoning_content"] = self.reasoning
        if self.tool_calls:
            message["tool_calls"] = [
                {"id": call_id, "type": "function",
                 "function": {"name": call.name, "arguments": call.arguments}}
                for call_id, call in zip(call_ids, self.tool_calls, strict=True)
            ]
        return message


class AssistantStream:
    def __init__(self, decoder: IncrementalDecoder, reasoning: ReasoningParser | None,
                 tools: ToolParser | None, stops: tuple[str, ...] = (), *,
                 continues: bool = False, earlier_calls: int = 0,
                 guard: MarkerGuard | None = None) -> None:
        """``earlier_calls``: tool calls in the conversation before this answer (for a
        format whose ids count them); ``guard``: the markers read from token ids."""
        self._earlier_calls = earlier_calls
        self._guard = guard or MarkerGuard({})
        self._decoder = decoder
        self._stop = StopTrim(stops)
        self._reasoning = reasoning
        self._tools = tools
        self._content = Held(strip_leading=not continues)
        self.reply = Reply()

    def call_id(self, base: str, position: int) -> str:
        """The id of call ``position`` in the answer ``base``, in the format's own shape
        (Mistral's templates take 9 alphanumeric characters only, Kimi's count calls)."""
        if self._tools is None:
            return openai_call_id(base, position)
        return self._tools.call_id(base, position, self.reply.tool_calls[position].name,
                                   self._earlier_calls)

    def feed(self, token_id: int) -> list[Delta]:
        return self._route(self._stop.feed(self._guard.feed(token_id,
                                                            self._decoder.feed(token_id))))

    def finish(self) -> list[Delta]:
        deltas = self._route(self._stop.feed(self._guard.finish(self._decoder.finish())))
        deltas += self._route(self._stop.finish())
        if self._reasoning is not None:
            deltas += self._parts(self._reasoning.finish())
        if self._tools is not None:
            rest, calls = self._tools.finish()
            deltas += self._show_content(rest)
            restore = self._guard.restore
            self.reply.tool_calls = [ToolCall(restore(c.name), restore(c.arguments))
                                     for c in calls]
        return deltas

    def _route(self, text: str) -> list[Delta]:
        if not text:
            return []
        return self._parts(self._reasoning.feed(text) if self._reasoning else [("content", text)])

    def _parts(self, parts: list[tuple[str, str]]) -> list[Delta]:
        deltas: list[Delta] = []
        for kind, text in parts:
            if kind == "reasoning":
                text = self._guard.restore(text)
                self.reply.reasoning += text
                deltas.append(Delta("reasoning_content", text))
            else:
                deltas += self._show_content(self._tools.feed(text) if self._tools else text)
        return deltas

    def _show_content(self, text: str) -> list[Delta]:
        shown = self._guard.restore(self._content.feed(text)) if text else ""
        if not shown:
            return []
        self.reply.content += shown
        return [Delta("content", shown)]
