"""The JSON-schema types xgrammar (SGLang's default grammar backend) infers, written out
for llguidance: a subschema without ``type`` (open to every value in JSON Schema) is an
object when it has ``properties`` or ``additionalProperties``, an array when it has
``items`` (xgrammar 0.2.9).

Invariants:
- Only subschemas without ``type``, ``$ref``, ``enum``, ``const``, ``anyOf``, ``oneOf``
  or ``allOf`` gain a ``type``, as its first key; nothing else changes.
- The walk is iterative and visits each subschema once: O(size of the schema).
"""

from __future__ import annotations

from typing import Any

__all__ = ["with_inferred_types"]

_SETTLED = ("type", "$ref", "enum", "const", "anyOf", "oneOf", "allOf")
_ONE = ("additionalProperties", "items", "not", "contains", "if", "then", "else",
        "unevaluatedProperties", "propertyNames")
_MANY = ("anyOf", "oneOf", "allOf", "prefixItems", "items")  # a list of items: draft-4 tuples
_NAMED = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")


def with_inferred_types(schema: Any) -> Any:
    """``schema`` (freshly parsed: it is changed in place and returned) where every
    subschema xgrammar would read as an object or an array says so (``"type"`` first);
    anything that is not a dict is returned as is."""
    if not isinstance(schema, dict):
        return schema
    stack: list[Any] = [schema]
    while stack:
        node = stack.pop()
        if not isinstance(node, dict):
            continue
        kind = "object" if "properties" in node or "additionalProperties" in node else "array"
        if not any(key in node for key in _SETTLED) and (kind == "object" or "items" in node):
            rest = dict(node)
            node.clear()
            node.update({"type": kind, **rest})
        stack.extend(node[key] for key in _ONE if isinstance(node.get(key), dict))
        stack.extend(sub for key in _MANY if isinstance(node.get(key), list) for sub in node[key])
        stack.extend(sub for key in _NAMED if isinstance(node.get(key), dict)
                     for sub in node[key].values())
    return schema
