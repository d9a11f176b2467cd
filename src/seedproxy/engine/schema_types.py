"""The JSON-schema types xgrammar (SGLang's default grammar backend) infers, written out
for llguidance.

A subschema without ``type`` is open to every JSON value in JSON Schema and llguidance
(SGLang's named-tool schema would admit ``[false]``); xgrammar 0.2.9 reads it as an object
when it has ``properties`` or ``additionalProperties``, an array when it has ``items``, any
value otherwise.

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
_MANY = ("anyOf", "oneOf", "allOf", "prefixItems")
_NAMED = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")


def _inferred(node: dict[str, Any]) -> str | None:
    if any(key in node for key in _SETTLED):
        return None
    if "properties" in node or "additionalProperties" in node:
        return "object"
    if "items" in node:
        return "array"
    return None


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
        kind = _inferred(node)
        if kind is not None:
            rest = dict(node)
            node.clear()
            node["type"] = kind
            node.update(rest)
        stack.extend(node[key] for key in _ONE if isinstance(node.get(key), dict))
        if isinstance(node.get("items"), list):  # draft-4 tuples
            stack.extend(node["items"])
        for key in _MANY:
            if isinstance(node.get(key), list):
                stack.extend(node[key])
        for key in _NAMED:
            if isinstance(node.get(key), dict):
                stack.extend(node[key].values())
    return schema
