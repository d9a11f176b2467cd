"""What every tool-call format shares: the streaming shell and JSON decoding.

A parser streams content until its start marker, then captures to the end of the
completion and parses it once (``parse``). Text outside the calls (and a block that is
no call) is content, as SGLang's streaming detectors show it; a capture holding no call
is content exactly as generated, never an error. JSON that ``json`` refuses or nested
deeper than ``nesting.MAX_DEPTH`` is not a call. Streaming and whole input agree.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from ...nesting import too_deep
from ...stop_strings import partial_tag
from .structural import CallFrame, ToolAsk, frame_tag

__all__ = ["ToolCall", "ToolParser", "call_of", "decode_at", "loads", "openai_call_id",
           "schema_properties", "skip_space", "tagged_calls"]

_DECODER = json.JSONDecoder()


@dataclass(frozen=True, slots=True)
class ToolCall:
    name: str
    arguments: str  # a JSON object, as text


def decode_at(text: str, pos: int) -> tuple[Any, int] | None:
    """The JSON value after any spaces at ``text[pos]`` and the index after it, or None
    (invalid, too deep, an integer past Python's digit limit)."""
    try:
        value, end = _DECODER.raw_decode(text, skip_space(text, pos))
    except (RecursionError, ValueError):  # JSONDecodeError is a ValueError
        return None
    return None if too_deep(value) else (value, end)


def loads(text: str, default: Any = None) -> Any:
    """The JSON value that is the whole of ``text`` (spaces around it allowed), or
    ``default``."""
    got = decode_at(text, 0)
    return got[0] if got is not None and not text[got[1]:].strip() else default


def skip_space(text: str, pos: int) -> int:
    while pos < len(text) and text[pos].isspace():
        pos += 1
    return pos


def tagged_calls(captured: str, start: str,
                 take: Callable[[str], tuple[list[ToolCall] | None, int]],
                 find: Callable[[str], tuple[int, int] | None] | None = None
                 ) -> tuple[list[ToolCall], str]:
    """Blocks each opened by a start tag (``captured`` begins just after the first one,
    ``start``): ``take(the text after a start)`` gives the block's calls (None: it is no
    call, and stays content, its tag included) and where the block ends; ``find(text)``
    gives the next start tag's index and length (None: none; by default ``start``).
    Text between and after the blocks is content. Returns the calls and that content."""
    def plain(text: str) -> tuple[int, int] | None:
        at = text.find(start)
        return None if at < 0 else (at, len(start))

    calls: list[ToolCall] = []
    outside: list[str] = []
    marker, rest = start, captured
    while True:
        found, stop = take(rest)
        if found is None:
            outside.append(marker + rest[:stop])
        else:
            calls += found
        rest = rest[stop:]
        where = (find or plain)(rest)
        if where is None:
            outside.append(rest)
            return calls, "".join(outside)
        at, size = where
        outside.append(rest[:at])
        marker, rest = rest[at:at + size], rest[at + size:]


def schema_properties(schema: Any) -> dict[str, Any]:
    """A ``parameters`` schema's top-level properties, from its ``anyOf``/``oneOf``/
    ``allOf`` branches when it declares none (the first branch naming a key wins), as
    SGLang's ``get_schema_properties`` reads them."""
    if not isinstance(schema, dict):
        return {}
    if isinstance(schema.get("properties"), dict):
        return dict(schema["properties"])
    merged: dict[str, Any] = {}
    for keyword in ("anyOf", "oneOf", "allOf"):
        branches = schema.get(keyword)
        for branch in branches if isinstance(branches, list) else []:
            for key, value in schema_properties(branch).items():
                merged.setdefault(key, value)
    return merged


def call_of(item: Any, args_key: str = "arguments") -> ToolCall | None:
    """A call from ``{"name", args_key}`` (``arguments`` also read), or None."""
    if not isinstance(item, dict) or not isinstance(item.get("name"), str) or not item["name"]:
        return None
    args = item.get(args_key, item.get("arguments", {}))
    args = loads(args) if isinstance(args, str) else args
    if not isinstance(args, dict):
        return None
    return ToolCall(item["name"], json.dumps(args, ensure_ascii=False))


def openai_call_id(base: str, position: int) -> str:
    """``call_`` + 24 hex digits derived from ``base`` (the completion's id, choice)."""
    return "call_" + hashlib.sha256(f"{base}:{position}".encode()).hexdigest()[:24]


class ToolParser:
    """Streams content until ``start`` is seen, then captures to the end."""

    start: ClassVar[str] = ""
    markers: ClassVar[tuple[str, ...]] = ()
    """Special tokens of the format, kept in the decoded text for the parser."""
    kept_stops: ClassVar[tuple[str, ...]] = ()
    """Stop tokens kept as text for the parser (SGLang keeps gpt-oss's ``<|call|>``)."""
    numbered: ClassVar[bool] = False
    """Whether call ids count the conversation's earlier calls (``call_id``'s ``earlier``)."""
    frame: ClassVar[CallFrame | None] = None
    """How SGLang's detector frames a call in its structural tag; None: it builds none."""

    def __init__(self, tools: Sequence[Mapping[str, Any]] = ()) -> None:
        """``tools``: the request's checked ``tools``; one parser per answer."""
        self._buffer = ""
        self._captured: str | None = None
        self._raw_marker = ""

    @staticmethod
    def call_id(base: str, position: int, name: str = "", earlier: int = 0) -> str:
        """The id of call ``position`` (named ``name``) of the answer ``base``, stable
        across reruns; ``earlier``: the calls in the conversation before this answer."""
        return openai_call_id(base, position)

    @classmethod
    def structural_tag(cls, ask: ToolAsk) -> str | None:
        """The ``structural_tag`` SGLang's chat route constrains ``ask``'s calls with, or
        None where it sends none (a forced call then takes the JSON array)."""
        return frame_tag(cls.frame, ask) if cls.frame else None

    def feed(self, text: str) -> str:
        """Content that can be shown now."""
        if self._captured is not None:
            self._captured += text
            return ""
        self._buffer += text
        found = self._find_start(self._buffer)
        if found is not None:
            at, size = found
            shown, self._raw_marker = self._buffer[:at], self._buffer[at:at + size]
            self._captured, self._buffer = self._buffer[at + size:], ""
            return shown
        cut = len(self._buffer) - self._hold(self._buffer)
        shown, self._buffer = self._buffer[:cut], self._buffer[cut:]
        return shown

    def finish(self) -> tuple[str, list[ToolCall]]:
        """(content left to show, the calls); no call at all comes back as content."""
        if self._captured is None:
            return self._buffer, []
        calls, outside = self.parse(self._captured)
        return (outside, calls) if calls else (self._raw_marker + self._captured, [])

    def _find_start(self, text: str) -> tuple[int, int] | None:
        """Where the calls start and the marker's length there."""
        at = text.find(self.start)
        return (at, len(self.start)) if at >= 0 else None

    def _hold(self, text: str) -> int:
        return partial_tag(text, self.start)

    def parse(self, captured: str) -> tuple[list[ToolCall], str]:
        """The calls in what followed the marker, and the text outside them."""
        raise NotImplementedError
