"""A structural tag's node tree (``struct_format``) as one llguidance grammar keeping
xgrammar's language exactly, though xgrammar runs an Earley parser over characters and
llguidance's lexer takes the longest lexeme without backtracking:
- A *regular* subtree (only ``const_string``, ``regex``, ``any_text``, ``sequence``,
  ``or``, repeats, ``tag``, ``tags_with_separator``) is one terminal, merged into the
  terminal before it (``follow``), so free text then a string is one lexeme ending where
  xgrammar's would. Free text followed by unmergeable grammar is refused.
- ``any_text`` and ``triggered_tags`` inside a tag exclude the tag's ends (xgrammar's
  ``TagDispatch``); ``triggered_tags``' free text is cut at the first trigger by one lazy
  lexeme per trigger (excluding terminals run out of lexer fuel from ~20 triggers).
- ``json_schema`` is inline ``%json`` (``schema_types``' inferred types), ``grammar`` a
  side grammar. Known differences: a JSON value, grammar or ``regex`` lexeme that can run
  on into what follows takes the longest (xgrammar any split); two JSON values in a row
  may have JSON whitespace between them.

SGLang's legacy structural tag (``seedproxy.legacy_tag``) is written as SGLang's
llguidance backend writes it (``legacy_grammar``): one lazy trigger per structure (free
text up to the trigger, the rest of ``begin``, a value of the schema, ``end``), its
trigger the first of ``triggers`` that ``begin`` starts with, else the first. ``begin``,
``end`` and triggers are literal text; only a trigger that is exactly one special token
(``special_id``) is matched by id (``<[128010]>``). Either grammar is a pure function of
its input; a malformed tag is a ``ValueError`` (the caller's 400).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ..legacy_tag import legacy_structures
from .schema_types import with_inferred_types
from .struct_format import (
    AnyText,
    Const,
    Grammar,
    Json,
    Node,
    Or,
    Regex,
    Repeat,
    Separated,
    Seq,
    Tag,
    Triggered,
    open_ended,
)

__all__ = ["format_grammar", "legacy_grammar"]

_ANY = "/(?s:.*)/"
_STUCK = ("free text (any_text) followed by a JSON schema, a grammar or triggered_tags cannot "
          "be matched exactly")


def format_grammar(node: Node) -> str:
    """llguidance's grammar text for ``node``; ``ValueError`` where it cannot be exact."""
    from llguidance import grammar_from

    writer = _Writer()
    start = writer.emit(node, (), None, tail=True)
    lark = "%llguidance {}\nstart: " + start + "\n" + "".join(writer.defs)
    if not writer.sides:
        return str(grammar_from("lark", lark))
    return json.dumps({"grammars": [{"name": "structural_tag", "lark_grammar": lark},
                                    *writer.sides]})


def _lit(text: str) -> str:
    return json.dumps(text)


def _alt(texts: tuple[str, ...]) -> str:
    return "(" + " | ".join(_lit(t) for t in texts) + ")"


def _free(excludes: tuple[str, ...]) -> str:
    """Any text in which none of ``excludes`` occurs."""
    if not excludes:
        return _ANY
    return f"({_ANY} & ~({_ANY} {_alt(excludes)} {_ANY}))"


def _regular(node: Node) -> bool:
    if isinstance(node, Const | Regex | AnyText):
        return True
    if isinstance(node, Seq | Or):
        return all(_regular(e) for e in node.elements)
    if isinstance(node, Tag | Repeat):
        return _regular(node.content)
    if isinstance(node, Separated):
        return all(_regular(t) for t in node.tags)
    return False


def _repeat(item: str, separator: str, at_least_one: bool, stop_after_first: bool) -> str:
    """xgrammar's ``tags_with_separator`` shapes over one alternation of the tags."""
    if stop_after_first:
        return item if at_least_one else f"({item})?"
    sep = f"{_lit(separator)} " if separator else ""
    many = f"{item} ({sep}{item})*"
    return many if at_least_one else f"({many})?"


def _times(item: str, node: Repeat) -> str:
    if node.high is None:
        return f"({item})" + ("*" if node.low == 0 else "+" if node.low == 1 else
                              f"{{{node.low},}}")
    return f"({item}){{{node.low},{node.high}}}"


def _ends(tag: Tag) -> tuple[str, ...]:
    return tuple(e for e in tag.ends if e)


class _Writer:
    def __init__(self) -> None:
        self.defs: list[str] = []
        self.sides: list[dict[str, Any]] = []

    def _define(self, kind: str, body: str) -> str:
        """A new terminal (``kind`` "t") or lazy rule (``"c[lazy]"``) for ``body``."""
        name = f"sf_{kind[0]}{len(self.defs)}"
        if kind == "t":
            name = name.upper()
        self.defs.append(f"{name}{kind[1:]}: {body}\n")
        return name.split("[")[0]

    def _after(self, follow: str | None) -> str:
        """``follow`` as a lexeme of its own after a rule (a leading space), or ""."""
        return "" if follow is None else " " + self._define("t", follow)

    def term(self, node: Node, excl: tuple[str, ...]) -> str:
        """A regular node as a terminal expression; ``excl``: the enclosing tag's ends."""
        if isinstance(node, Const):
            return _lit(node.value)
        if isinstance(node, Regex):
            from llguidance._lib import regex_to_lark

            return "/" + regex_to_lark(node.pattern, "dw") + "/"
        if isinstance(node, AnyText):
            return _free(node.excludes + excl)
        if isinstance(node, Seq):
            return "(" + " ".join(self.term(e, excl) for e in node.elements) + ")"
        if isinstance(node, Or):
            return "(" + " | ".join(self.term(e, excl) for e in node.elements) + ")"
        if isinstance(node, Repeat):
            return _times(self.term(node.content, excl), node)
        if isinstance(node, Tag):
            ends = _ends(node)
            end = " " + _alt(ends) if ends else ""
            return f"({_lit(node.begin)} {self.term(node.content, ends)}{end})"
        assert isinstance(node, Separated)
        item = "(" + " | ".join(self.term(t, ()) for t in node.tags) + ")"
        return "(" + _repeat(item, node.separator, node.at_least_one,
                             node.stop_after_first) + ")"

    def emit(self, node: Node, excl: tuple[str, ...], follow: str | None, *,
             tail: bool) -> str:
        """A rule expression matching ``node`` then ``follow`` (a terminal expression, or
        None); ``tail``: nothing at all comes after (the end of the output)."""
        if _regular(node):
            expr = self.term(node, excl)
            if follow is not None:
                expr = f"{expr} {follow}"
            elif not tail and open_ended(node):
                raise ValueError(_STUCK)
            return self._define("t", expr)
        if isinstance(node, Json):
            schema = {} if node.schema is True else with_inferred_types(node.schema)
            try:
                text = json.dumps(schema)
            except RecursionError:
                raise ValueError("json_schema is nested too deeply") from None
            return f"%json {text}{self._after(follow)}"
        if isinstance(node, Grammar):
            from llguidance import grammar_from

            name = f"sf_g{len(self.sides)}"
            self.sides.append({"name": name, "lark_grammar": grammar_from("ebnf", node.ebnf)})
            return f"@{name}{self._after(follow)}"
        if isinstance(node, Seq):
            return self._seq(node.elements, excl, follow, tail)
        if isinstance(node, Or):
            return "(" + " | ".join(self.emit(e, excl, follow, tail=tail)
                                    for e in node.elements) + ")"
        if isinstance(node, Repeat):
            return (_times(self.emit(node.content, excl, None, tail=False), node)
                    + self._after(follow))
        if isinstance(node, Tag):
            return self._tag(node, follow, tail)
        if isinstance(node, Triggered):
            return self._triggered(node, excl, follow, tail)
        assert isinstance(node, Separated)
        item = "(" + " | ".join(self._tag(t, None, False) for t in node.tags) + ")"
        return "(" + _repeat(item, node.separator, node.at_least_one,
                             node.stop_after_first) + ")" + self._after(follow)

    def _seq(self, elements: tuple[Node, ...], excl: tuple[str, ...], follow: str | None,
             tail: bool) -> str:
        parts: list[str] = []
        for el in reversed(elements):  # each regular run merges into what precedes it
            if _regular(el):
                if follow is None and not tail and open_ended(el):
                    raise ValueError(_STUCK)
                piece = self.term(el, excl)
                follow = piece if follow is None else f"{piece} {follow}"
            else:
                parts.append(self.emit(el, excl, follow, tail=tail))
                follow, tail = None, False
        if follow is not None:
            parts.append(self._define("t", follow))
        return " ".join(reversed(parts))

    def _tag(self, tag: Tag, follow: str | None, tail: bool) -> str:
        ends = _ends(tag)
        begin = _lit(tag.begin) + " " if tag.begin else ""
        if not ends:  # the content is closed (checked on reading)
            return begin + self.emit(tag.content, (), follow, tail=tail)
        inner = _alt(ends) if follow is None else f"{_alt(ends)} {follow}"
        return begin + self.emit(tag.content, ends, inner, tail=False)

    def _triggered(self, node: Triggered, excl: tuple[str, ...], follow: str | None,
                   tail: bool) -> str:
        banned = node.excludes + excl
        free = self._define("t", _free(banned)) if banned else _ANY
        loops = []
        for trigger, group in zip(node.triggers, node.groups, strict=True):
            cut = self._define("c[lazy]", f"{free} {_lit(trigger)}")
            rests = [self._tag(Tag(t.begin[len(trigger):], t.content, t.ends), None, False)
                     for t in group]
            loops.append(f"{cut} ({' | '.join(rests)})")
        loop = "(" + " | ".join(loops) + ")"
        first = "(" + " | ".join(self._tag(t, None, False) for g in node.groups
                                 for t in g) + ")"
        if node.at_least_one and node.stop_after_first:
            return first + self._after(follow)
        if follow is None and not tail:
            raise ValueError("triggered_tags' free text followed by a JSON schema, a grammar "
                             "or more triggered_tags cannot be matched exactly")
        text = _free(node.triggers + banned)
        rest = self._define("t", text if follow is None else f"{text} {follow}")
        if node.stop_after_first:
            return f"({rest} | {loop}{self._after(follow)})"
        head = first + " " if node.at_least_one else ""
        return f"{head}{loop}* {rest}"


def _read(tag: dict[str, Any]) -> list[tuple[str, str, Any, str]]:
    """The tag's structures as ``(trigger, begin, schema, end)``."""
    structures, triggers, _ = legacy_structures(tag)
    if not triggers or not all(triggers):
        raise ValueError("triggers must be a non-empty list of non-empty strings")
    if not structures:
        raise ValueError("structures must be a non-empty list")
    read = []
    for begin, schema, end in structures:
        if not isinstance(schema, dict | str):
            raise ValueError("each structure's schema must be a JSON schema")
        trigger = next((t for t in triggers if begin.startswith(t)), triggers[0])
        if not begin.startswith(trigger):
            raise ValueError(f"begin {begin[:64]!r} does not start with a trigger")
        read.append((trigger, begin, with_inferred_types(schema), end))
    return read


def legacy_grammar(tag: dict[str, Any], special_id: Callable[[str], int | None]) -> str:
    """llguidance's grammar text for the legacy ``tag``: lark, or llguidance's JSON form
    when a schema is given as a lark grammar (a string not starting with ``{``);
    ``ValueError`` where the tag is malformed."""
    from llguidance import grammar_from

    structures = _read(tag)
    options = " | ".join(f"tag_{i}" for i in range(len(structures)))
    lines = ["%llguidance {}", f"start: ({options})* tag_end", "tag_end: TAG_TEXT",
             r"TAG_TEXT: /(.|\n)*/"]
    sides = []
    for i, (trigger, begin, schema, end) in enumerate(structures):
        if isinstance(schema, dict):
            value = "%json " + json.dumps(schema)
        elif schema.lstrip().startswith("{"):
            value = "%json " + schema
        else:
            sides.append({"name": f"tag_{i}_grm", "lark_grammar": schema})
            value = f"@tag_{i}_grm"
        rest, end = begin[len(trigger):], _lit(end) if end else ""
        body = " ".join(p for p in (_lit(rest) if rest else "", value, end) if p)
        token = special_id(trigger)
        if token is not None:
            lines.append(f"tag_{i}: TAG_TEXT <[{token}]> {body}")
        else:
            lines.append(f"tag_{i}_trig[lazy]: TAG_TEXT {_lit(trigger)}")  # non-empty
            lines.append(f"tag_{i}: tag_{i}_trig {body}")
    lark = "\n".join(lines) + "\n"
    if sides:
        return json.dumps({"grammars": [{"name": "struct_tag", "lark_grammar": lark},
                                        *sides]})
    return str(grammar_from("lark", lark))
