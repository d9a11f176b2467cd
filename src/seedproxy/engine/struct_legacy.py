"""SGLang's legacy structural tag (``{"structures": [{"begin", "schema", "end"}],
"triggers": [...]}``, shaped as ``seedproxy.legacy_tag`` reads it) written as one
llguidance grammar, as SGLang's llguidance backend builds it: one lazy trigger per
structure (free text up to the trigger, the rest of ``begin``, a value of the schema,
``end``), its trigger the first of ``triggers`` that ``begin`` starts with, else the first.

As xgrammar (SGLang's default backend), ``begin``, ``end`` and triggers are literal text
even where they look like a tag (``<a>``); only a trigger that is exactly one special
token (``special_id``) is matched as that token, by id (``<[128010]>``).

Invariant: the grammar is a pure function of the tag and ``special_id``'s answers; a
malformed tag is a ``ValueError`` (the caller's 400).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ..legacy_tag import legacy_structures
from .schema_types import with_inferred_types

__all__ = ["legacy_grammar"]

_TEXT = r"(.|\n)*"


def _lit(text: str) -> str:
    return json.dumps(text) if text else ""


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
             f"TAG_TEXT: /{_TEXT}/"]
    sides = []
    for i, (trigger, begin, schema, end) in enumerate(structures):
        if isinstance(schema, dict):
            value = "%json " + json.dumps(schema)
        elif schema.lstrip().startswith("{"):
            value = "%json " + schema
        else:
            sides.append({"name": f"tag_{i}_grm", "lark_grammar": schema})
            value = f"@tag_{i}_grm"
        body = " ".join(p for p in (_lit(begin[len(trigger):]), value, _lit(end)) if p)
        token = special_id(trigger)
        if token is not None:
            lines.append(f"tag_{i}: TAG_TEXT <[{token}]> {body}")
        else:
            lines.append(f"tag_{i}_trig[lazy]: TAG_TEXT {_lit(trigger)}")
            lines.append(f"tag_{i}: tag_{i}_trig {body}")
    lark = "\n".join(lines) + "\n"
    if sides:
        return json.dumps({"grammars": [{"name": "struct_tag", "lark_grammar": lark},
                                        *sides]})
    return str(grammar_from("lark", lark))
