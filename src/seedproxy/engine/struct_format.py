"""xgrammar's structural tag (``{"type": "structural_tag", "format": {...}}``) read into
checked nodes for ``struct_lark``, as xgrammar 0.2.9 (SGLang's default grammar backend)
reads it, with its refusals (an empty ``sequence``, ``or``, ``triggers`` or ``tags``; a
tag matching no trigger or several). What llguidance cannot hold exactly (token-level
formats, ``dispatch``, XML styles, ``max_tokens``/``max_chars``, ``lark``) is refused by
name.

Invariants:
- Every field's type is checked before anything is built; a bad one is a ``ValueError``
  naming where it is (the caller's 400). Unknown keys are ignored, as xgrammar's are.
- At most ``MAX_DEPTH`` levels and ``MAX_NODES`` nodes (each string of a list counts), so
  reading is O(input) and never meets Python's recursion limit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["MAX_DEPTH", "MAX_NODES", "MAX_REPEAT", "AnyText", "Const", "Grammar", "Json",
           "Node", "Or", "Regex", "Repeat", "Separated", "Seq", "Tag", "Triggered",
           "open_ended", "read_format"]

MAX_DEPTH = 32
MAX_NODES = 1000

_REFUSED = {
    **dict.fromkeys(("token", "exclude_token", "any_tokens", "token_triggered_tags",
                     "token_dispatch"), "token-level formats are not supported"),
    "dispatch": "string-dispatched free text is only supported as triggered_tags",
    "qwen_xml_parameter": "XML argument styles are not supported",
}
MAX_REPEAT = 1000


@dataclass(frozen=True, slots=True)
class Const:
    value: str


@dataclass(frozen=True, slots=True)
class Regex:
    pattern: str


@dataclass(frozen=True, slots=True)
class Json:
    schema: dict[str, Any] | bool


@dataclass(frozen=True, slots=True)
class Grammar:
    ebnf: str


@dataclass(frozen=True, slots=True)
class AnyText:
    excludes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Seq:
    elements: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Or:
    elements: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Repeat:
    """``optional``, ``plus``, ``star`` and ``repeat``: ``content`` ``low`` to ``high``
    times (``high`` None: unbounded)."""
    content: Node
    low: int
    high: int | None


@dataclass(frozen=True, slots=True)
class Tag:
    begin: str
    content: Node
    ends: tuple[str, ...]
    """Non-empty; ``("",)`` when the tag has no end."""


@dataclass(frozen=True, slots=True)
class Triggered:
    triggers: tuple[str, ...]
    groups: tuple[tuple[Tag, ...], ...]
    """``groups[i]``: the tags whose ``begin`` starts with ``triggers[i]``."""
    at_least_one: bool
    stop_after_first: bool
    excludes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Separated:
    tags: tuple[Tag, ...]
    separator: str
    at_least_one: bool
    stop_after_first: bool


Node = (Const | Regex | Json | Grammar | AnyText | Seq | Or | Repeat | Tag | Triggered
        | Separated)


def read_format(tag: Any) -> Node:
    """The checked node tree of a structural tag object (``{"type": "structural_tag",
    "format": {...}}``); ``ValueError`` for anything xgrammar would refuse or this
    engine cannot hold exactly."""
    if not isinstance(tag, dict):
        raise ValueError("must be a JSON object")
    if tag.get("type", "structural_tag") != "structural_tag":
        raise ValueError("type must be 'structural_tag'")
    return _Reader().node(tag.get("format"), "format", 1)


class _Reader:
    def __init__(self) -> None:
        self.count = 0

    def _tick(self, n: int = 1) -> None:
        self.count += n
        if self.count > MAX_NODES:
            raise ValueError(f"more than {MAX_NODES} nodes")

    def node(self, raw: Any, where: str, depth: int) -> Node:
        if depth > MAX_DEPTH:
            raise ValueError(f"{where}: nested deeper than {MAX_DEPTH} levels")
        if not isinstance(raw, dict):
            raise ValueError(f"{where} must be an object")
        kind = raw.get("type")
        if not isinstance(kind, str):
            raise ValueError(f"{where}.type must be a string")
        self._tick()
        if kind in _REFUSED:
            raise ValueError(f"{where}: type {kind!r} is not supported by the embedded "
                             f"engine ({_REFUSED[kind]})")
        reader = _READERS.get(kind)
        if reader is None:
            raise ValueError(f"{where}: unknown type {kind[:64]!r}")
        return reader(self, raw, where, depth)

    def strings(self, raw: Any, where: str, *, nonempty_items: bool = False) -> tuple[str, ...]:
        if not isinstance(raw, list) or not all(isinstance(s, str) for s in raw):
            raise ValueError(f"{where} must be a list of strings")
        self._tick(len(raw))
        if nonempty_items and not all(raw):
            raise ValueError(f"{where} must not hold an empty string")
        return tuple(raw)

    def children(self, raw: dict[str, Any], where: str, depth: int) -> tuple[Node, ...]:
        items = raw.get("elements")
        if not isinstance(items, list):
            raise ValueError(f"{where}.elements must be a list")
        if not items:
            raise ValueError(f"{where}.elements must have at least one element")
        self._tick(len(items))
        return tuple(self.node(item, f"{where}.elements[{i}]", depth + 1)
                     for i, item in enumerate(items))

    def tag(self, raw: Any, where: str, depth: int) -> Tag:
        """A tag in a ``tags`` list (``type`` optional)."""
        if depth > MAX_DEPTH:
            raise ValueError(f"{where}: nested deeper than {MAX_DEPTH} levels")
        if not isinstance(raw, dict) or raw.get("type", "tag") != "tag":
            raise ValueError(f"{where} must be a tag")
        self._tick()
        return self.tag_body(raw, where, depth)

    def tag_body(self, raw: dict[str, Any], where: str, depth: int) -> Tag:
        begin, end = raw.get("begin"), raw.get("end")
        if not isinstance(begin, str):
            raise ValueError(f"{where}.begin must be a string (token begins are not "
                             "supported)")
        if isinstance(end, str):
            ends: tuple[str, ...] = (end,)
        elif isinstance(end, list):
            ends = self.strings(end, f"{where}.end")
            if not ends:
                raise ValueError(f"{where}.end must not be an empty list")
        else:
            raise ValueError(f"{where}.end must be a string or a list of strings")
        content = self.node(raw.get("content"), f"{where}.content", depth + 1)
        if not any(ends) and open_ended(content):
            raise ValueError(f"{where}: when the content is unlimited, at least one end "
                             "string must be non-empty")
        return Tag(begin, content, ends)

    def tags(self, raw: dict[str, Any], where: str, depth: int) -> tuple[Tag, ...]:
        items = raw.get("tags")
        if not isinstance(items, list) or not items:
            raise ValueError(f"{where}.tags must be a non-empty list of tags")
        return tuple(self.tag(item, f"{where}.tags[{i}]", depth + 1)
                     for i, item in enumerate(items))


def _flag(raw: dict[str, Any], key: str, where: str) -> bool:
    value = raw.get(key, False)
    if not isinstance(value, bool):
        raise ValueError(f"{where}.{key} must be a boolean")
    return value


def _text(raw: dict[str, Any], key: str, where: str) -> str:
    value = raw.get(key)
    if not isinstance(value, str):
        raise ValueError(f"{where}.{key} must be a string")
    return value


def _unset(raw: dict[str, Any], where: str, *keys: str) -> None:
    for key in keys:
        if raw.get(key) is not None:
            raise ValueError(f"{where}.{key} is not supported by the embedded engine")


def _regex(r: _Reader, raw: dict[str, Any], where: str, depth: int) -> Node:
    pattern = _text(raw, "pattern", where)
    if not pattern:
        raise ValueError(f"{where}.pattern must be non-empty")
    return Regex(pattern)


def _json(r: _Reader, raw: dict[str, Any], where: str, depth: int) -> Node:
    schema = raw.get("json_schema")
    if not isinstance(schema, dict | bool):
        raise ValueError(f"{where}.json_schema must be a JSON schema (an object or a boolean)")
    if schema is False:
        raise ValueError(f"{where}.json_schema false cannot accept any value")
    if raw.get("style", "json") != "json":
        raise ValueError(f"{where}.style: only 'json' is supported by the embedded engine")
    if raw.get("any_order", False) is not False:
        raise ValueError(f"{where}.any_order is not supported by the embedded engine")
    if raw.get("excludes", []) != []:
        raise ValueError(f"{where}.excludes is not supported by the embedded engine")
    _unset(raw, where, "max_whitespace_cnt")
    return Json(schema)


def _grammar(r: _Reader, raw: dict[str, Any], where: str, depth: int) -> Node:
    if raw.get("syntax", "ebnf") != "ebnf":
        raise ValueError(f"{where}.syntax: only 'ebnf' is supported by the embedded engine "
                         "(xgrammar's lark dialect is not llguidance's)")
    return Grammar(_text(raw, "grammar", where))


def _any_text(r: _Reader, raw: dict[str, Any], where: str, depth: int) -> Node:
    _unset(raw, where, "max_tokens", "max_chars")
    return AnyText(r.strings(raw.get("excludes", []), f"{where}.excludes",
                             nonempty_items=True))


def _count(raw: dict[str, Any], key: str, where: str) -> int:
    value = raw.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not -1 <= value <= MAX_REPEAT:
        raise ValueError(f"{where}.{key} must be an integer from -1 to {MAX_REPEAT}")
    return value


def _repeat(r: _Reader, raw: dict[str, Any], where: str, depth: int) -> Node:
    content = r.node(raw.get("content"), f"{where}.content", depth + 1)
    kind = raw["type"]
    if kind != "repeat":
        low, high = {"optional": (0, 1), "plus": (1, None), "star": (0, None)}[kind]
        return Repeat(content, low, high)
    low, high = _count(raw, "min", where), _count(raw, "max", where)
    if low < 0 or (high != -1 and high < low):
        raise ValueError(f"{where}: min must be at least 0 and max at least min (or -1)")
    return Repeat(content, low, None if high == -1 else high)


def _triggered(r: _Reader, raw: dict[str, Any], where: str, depth: int) -> Node:
    triggers = r.strings(raw.get("triggers"), f"{where}.triggers", nonempty_items=True)
    if not triggers:
        raise ValueError(f"{where}.triggers must be non-empty")
    for i, t in enumerate(triggers):
        if any(j != i and t in u for j, u in enumerate(triggers)):
            raise ValueError(f"{where}.triggers: {t[:64]!r} is inside another trigger, so "
                             "which one fires is ambiguous")
    tags = r.tags(raw, where, depth)
    groups: list[list[Tag]] = [[] for _ in triggers]
    for i, tag in enumerate(tags):
        matched = [k for k, t in enumerate(triggers) if tag.begin.startswith(t)]
        if not matched:
            raise ValueError(f"{where}.tags[{i}] does not match any trigger")
        if len(matched) > 1:
            raise ValueError(f"{where}.tags[{i}] matches multiple triggers")
        groups[matched[0]].append(tag)
    for k, group in enumerate(groups):
        if not group:
            raise ValueError(f"{where}.triggers[{k}] starts no tag")
    return Triggered(triggers, tuple(tuple(g) for g in groups),
                     _flag(raw, "at_least_one", where), _flag(raw, "stop_after_first", where),
                     r.strings(raw.get("excludes", []), f"{where}.excludes",
                               nonempty_items=True))


def _separated(r: _Reader, raw: dict[str, Any], where: str, depth: int) -> Node:
    separator = _text(raw, "separator", where)
    return Separated(r.tags(raw, where, depth), separator,
                     _flag(raw, "at_least_one", where), _flag(raw, "stop_after_first", where))


_READERS: dict[str, Callable[[_Reader, dict[str, Any], str, int], Node]] = {
    "const_string": lambda r, raw, where, depth: Const(_text(raw, "value", where)),
    "sequence": lambda r, raw, where, depth: Seq(r.children(raw, where, depth)),
    "or": lambda r, raw, where, depth: Or(r.children(raw, where, depth)),
    "tag": _Reader.tag_body, "regex": _regex, "json_schema": _json, "grammar": _grammar,
    "any_text": _any_text, "optional": _repeat, "plus": _repeat, "star": _repeat,
    "repeat": _repeat, "triggered_tags": _triggered, "tags_with_separator": _separated,
}


def open_ended(node: Node) -> bool:
    """Whether ``node`` ends in free text (``any_text``, or ``triggered_tags``' text after
    its last tag), which only a following string can end."""
    if isinstance(node, AnyText):
        return True
    if isinstance(node, Triggered):
        return not node.stop_after_first or not node.at_least_one
    if isinstance(node, Seq):
        return open_ended(node.elements[-1])
    if isinstance(node, Or):
        return any(open_ended(e) for e in node.elements)
    if isinstance(node, Tag):
        return not any(node.ends) and open_ended(node.content)
    if isinstance(node, Repeat):
        return open_ended(node.content)
    return False
