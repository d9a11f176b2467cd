"""SGLang's legacy structural tag (``{"structures": [{"begin", "schema", "end"}],
"triggers": [...], "at_least_one"}``): the shape token-in-token-out mode writes and the
engine reads.

``legacy_structures`` checks every field's type first (a ``ValueError`` naming it); a
``schema`` is returned as given. ``legacy_tag`` is SGLang's
``LegacyStructuralTagResponseFormat`` dumped (key order included) as
``to_sampling_params`` sends it under ``structural_tag``.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["legacy_structures", "legacy_tag", "legacy_tag_text"]

Structure = tuple[str, Any, str]
"""``(begin, schema, end)``."""


def legacy_structures(tag: dict[str, Any]) -> tuple[list[Structure], list[str], bool]:
    """The tag's structures, triggers and ``at_least_one``."""
    structures, triggers = tag.get("structures"), tag.get("triggers")
    at_least_one = tag.get("at_least_one", False)
    if not isinstance(structures, list) or not all(
            isinstance(s, dict) and isinstance(s.get("begin"), str)
            and isinstance(s.get("end"), str) for s in structures):
        raise ValueError("structures must be a list of {begin, schema, end} with a string "
                         "begin and end")
    if not isinstance(triggers, list) or not all(isinstance(t, str) for t in triggers):
        raise ValueError("triggers must be a list of strings")
    if not isinstance(at_least_one, bool):
        raise ValueError("at_least_one must be a boolean")
    return [(s["begin"], s.get("schema"), s["end"]) for s in structures], triggers, at_least_one


def legacy_tag(structures: list[Structure], triggers: list[str],
               at_least_one: bool) -> dict[str, Any]:
    return {"type": "structural_tag",
            "structures": [{"begin": b, "schema": s, "end": e} for b, s, e in structures],
            "triggers": triggers, "at_least_one": at_least_one}


def legacy_tag_text(structures: list[Structure], triggers: list[str],
                    at_least_one: bool) -> str:
    return json.dumps(legacy_tag(structures, triggers, at_least_one))
