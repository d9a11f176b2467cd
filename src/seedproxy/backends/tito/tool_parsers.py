"""Tool-call parsers: text in, content and OpenAI tool calls out.

Each parser streams content until its start marker, then captures everything to the
end of the completion and parses it once. A capture that does not parse into calls
(malformed JSON, a missing name, text between calls, JSON nested deeper than
``nesting.MAX_DEPTH`` or that Python's ``json`` refuses: past its recursion limit, an
integer over 4,300 digits) is returned as content, exactly as generated: never an error.
Streaming and whole input give the same result.

- ``hermes`` (Qwen, Hermes): ``<tool_call>{"name", "arguments"}</tool_call>``, repeated.
- ``llama3-json``: the whole reply is ``{"name", "parameters"}`` (``<|python_tag|>`` or
  ``;``-separated calls allowed).
- ``mistral``: ``[TOOL_CALLS]`` followed by a JSON list of ``{"name", "arguments"}``.
- ``ForcedCallParser`` (``tool_choice`` ``required`` or a named tool, with or without a
  ``--tool-parser``): the whole reply is the JSON array the forcing grammar allows,
  read as SGLang's chat route reads a forced call (``tool_choice.parse_forced``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, ClassVar

from ...nesting import too_deep
from ...tool_choice import parse_forced
from .segments import partial_tag

__all__ = ["TOOL_PARSERS", "ForcedCallParser", "ToolCall", "ToolParser"]


@dataclass(frozen=True, slots=True)
class ToolCall:
    name: str
    arguments: str
    """A JSON object, as text."""


def _call(item: Any, args_key: str = "arguments") -> ToolCall | None:
    if not isinstance(item, dict) or not isinstance(item.get("name"), str) or not item["name"]:
        return None
    args = item.get(args_key, item.get("arguments", {}))
    if isinstance(args, str):
        args = _loads(args)
    if not isinstance(args, dict):
        return None
    return ToolCall(item["name"], json.dumps(args, ensure_ascii=False))


def _loads(text: str) -> Any:
    """The JSON value of ``text``, or None when it is not one we keep: invalid, too deep
    for ``json``'s recursion (RecursionError), an integer past Python's digit limit
    (ValueError, as JSONDecodeError is), or deeper than ``MAX_DEPTH``."""
    try:
        value = json.loads(text)
    except (RecursionError, ValueError):
        return None
    return None if too_deep(value) else value


class ToolParser:
    """Streams content until ``start`` is seen, then captures to the end."""

    start: ClassVar[str] = ""
    keep_marker: ClassVar[bool] = False
    """Whether the marker belongs to the captured text (parsed with it)."""

    def __init__(self) -> None:
        self._buffer = ""
        self._captured: str | None = None
        self._raw_marker = ""

    def feed(self, text: str) -> str:
        """Content that can be shown now."""
        if self._captured is not None:
            self._captured += text
            return ""
        self._buffer += text
        at = self._find_start(self._buffer)
        if at is not None:
            shown, rest = self._buffer[:at], self._buffer[at:]
            self._buffer = ""
            self._captured = rest if self.keep_marker else rest[len(self.start):]
            self._raw_marker = "" if self.keep_marker else self.start
            return shown
        keep = self._hold(self._buffer)
        shown = self._buffer[: len(self._buffer) - keep]
        self._buffer = self._buffer[len(self._buffer) - keep:]
        return shown

    def finish(self) -> tuple[str, list[ToolCall]]:
        """(content left to show, the calls); malformed calls come back as content."""
        if self._captured is None:
            rest, self._buffer = self._buffer, ""
            return rest, []
        calls = self.parse(self._captured)
        if not calls:
            return self._raw_marker + self._captured, []
        return "", calls

    def _find_start(self, text: str) -> int | None:
        at = text.find(self.start)
        return at if at >= 0 else None

    def _hold(self, text: str) -> int:
        return partial_tag(text, self.start)

    def parse(self, captured: str) -> list[ToolCall]:
        raise NotImplementedError


class HermesParser(ToolParser):
    start = "<tool_call>"
    end = "</tool_call>"

    def parse(self, captured: str) -> list[ToolCall]:
        calls: list[ToolCall] = []
        rest = captured
        while True:
            close = rest.find(self.end)
            body = rest if close < 0 else rest[:close]
            call = _call(_loads(body.strip()))
            if call is None:
                return []
            calls.append(call)
            if close < 0:
                return calls
            rest = rest[close + len(self.end):].strip()
            if not rest:
                return calls
            if not rest.startswith(self.start):
                return []  # text after a call: not a clean call list
            rest = rest[len(self.start):]


class Llama3JsonParser(ToolParser):
    start = "{"
    keep_marker = True
    _tag = "<|python_tag|>"

    def __init__(self) -> None:
        super().__init__()
        self._content = False
        """Set once the reply began as text: a call must be the whole reply."""

    def _find_start(self, text: str) -> int | None:
        if self._content:
            return None
        head = text.lstrip()
        if head.startswith(self._tag):
            return len(text) - len(head)
        if head.startswith("{"):
            return len(text) - len(head)
        return None

    def _hold(self, text: str) -> int:
        head = text.lstrip()
        if not self._content and (not head or self._tag.startswith(head)):
            return len(text)  # nothing shown yet: may still open a call
        self._content = True
        return 0

    def parse(self, captured: str) -> list[ToolCall]:
        body = captured.strip().removeprefix(self._tag).strip()
        calls = []
        for piece in body.split(";") if body else []:
            call = _call(_loads(piece.strip()), "parameters")
            if call is None:
                return []
            calls.append(call)
        return calls


class MistralParser(ToolParser):
    start = "[TOOL_CALLS]"

    def parse(self, captured: str) -> list[ToolCall]:
        items = _loads(captured.strip())
        if isinstance(items, dict):
            items = [items]
        if not isinstance(items, list) or not items:
            return []
        calls = [_call(item) for item in items]
        return [c for c in calls if c is not None] if all(calls) else []


class ForcedCallParser(ToolParser):
    """Captures the whole reply: a forced call has no text before it."""

    keep_marker = True

    def _find_start(self, text: str) -> int | None:
        return 0

    def parse(self, captured: str) -> list[ToolCall]:
        return [ToolCall(name, arguments) for name, arguments in parse_forced(captured) or ()]


TOOL_PARSERS: dict[str, type[ToolParser]] = {
    "hermes": HermesParser, "qwen": HermesParser,
    "llama3-json": Llama3JsonParser, "mistral": MistralParser,
}
