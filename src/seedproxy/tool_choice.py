"""A chat request's ``tools`` and ``tool_choice``, checked, and the grammar that forces a
call, as SGLang's chat route builds them (``serving_chat.py`` ``_validate_request``,
``function_call/utils.py`` ``get_json_schema_constraint``).

- ``tools``: ``{"type": "function", "function": {"name", "parameters"?}}`` each, whose
  ``parameters`` is a valid JSON Schema (Draft 2020-12); ``tool_choice``: ``auto``,
  ``none``, ``required`` or one of the tools by name. Else a ``ToolChoiceError``,
  raised before any work.
- ``required`` forces a JSON array (at least one item, at most one without
  ``parallel_tool_calls``) of ``{"name", "parameters"}`` of the tools; a named tool, the
  same over that tool alone. The schema is ``json.dumps`` of SGLang's dict, key order
  included, so an upstream receives the ``json_schema`` string SGLang's route sends.
- A forced call with another constraint is refused, as SGLang's ``to_sampling_params``
  refuses it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .nesting import too_deep

__all__ = ["Forcing", "ToolChoiceError", "forcing_of", "parse_forced", "tool_defs",
           "tools_rendered"]

class ToolChoiceError(ValueError):
    """A bad ``tools`` or ``tool_choice``: a 400 naming ``param``."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


@dataclass(frozen=True, slots=True)
class Forcing:
    schema: str
    """The JSON schema over the forced calls, as SGLang's chat route writes it."""
    name: str | None
    """The named tool, or None for ``required``."""


def _tool_name(tool: Any, i: int) -> str:
    function = tool.get("function") if isinstance(tool, dict) else None
    if not isinstance(function, dict) or tool.get("type", "function") != "function":
        raise ToolChoiceError(f"tools[{i}] must be {{\"type\": \"function\", \"function\": "
                              "{...}}", "tools")
    name = function.get("name")
    if not isinstance(name, str) or not name:
        raise ToolChoiceError(f"tools[{i}].function.name must be a non-empty string", "tools")
    return name


def _check_parameters(tool: dict[str, Any], i: int) -> None:
    from jsonschema import Draft202012Validator, SchemaError

    parameters = tool["function"].get("parameters")
    if parameters is None:
        return
    if not isinstance(parameters, dict):
        raise ToolChoiceError(f"Tool {i} function has invalid 'parameters' schema: "
                              "it must be a JSON object", "tools")
    try:
        Draft202012Validator.check_schema(parameters)
    except SchemaError as exc:
        raise ToolChoiceError(f"Tool {i} function has invalid 'parameters' schema: "
                              f"{exc.message}", "tools") from None
    except RecursionError:
        raise ToolChoiceError(f"Tool {i} function 'parameters' schema is too deeply nested "
                              "or contains a cycle.", "tools") from None


def _chosen(choice: Any) -> str | None:
    """The named tool of a ``tool_choice`` object; None for auto/none/required."""
    if choice is None or choice in ("auto", "none", "required"):
        return None
    name = None
    if isinstance(choice, dict) and choice.get("type") == "function":
        function = choice.get("function")
        name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(name, str) or not name:
        raise ToolChoiceError("tool_choice must be auto, none, required or "
                              '{"type": "function", "function": {"name": ...}}', "tool_choice")
    return name


def _tool_schema(tool: dict[str, Any]) -> dict[str, Any]:
    function = tool["function"]
    return {
        "properties": {
            "name": {"type": "string", "enum": [function["name"]]},
            "parameters": function.get("parameters") or {"type": "object", "properties": {}},
        },
        "required": ["name", "parameters"],
    }


def tool_defs(tools: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``$defs`` of every tool's ``parameters``, merged (SGLang's
    ``_get_tool_schema_defs``); ``ToolChoiceError`` when one name has two schemas."""
    found: dict[str, Any] = {}
    for tool in tools:
        for name, schema in ((tool["function"].get("parameters") or {}).get("$defs")
                             or {}).items():
            if name in found and found[name] != schema:
                raise ToolChoiceError(f"Tool definition '{name}' has multiple schemas, "
                                      "which is not supported.", "tools")
            found[name] = schema
    return found


def forcing_of(body: dict[str, Any]) -> Forcing | None:
    """Check ``body``'s tools and tool_choice; the forced-call grammar, if it forces one."""
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise ToolChoiceError("tools must be a list", "tools")
    tools = tools or []
    names = [_tool_name(tool, i) for i, tool in enumerate(tools)]
    choice = body.get("tool_choice")
    named = _chosen(choice)
    if choice == "required" and not tools:
        raise ToolChoiceError("Tools cannot be empty if tool choice is set to required.",
                              "tool_choice")
    if named is not None and not tools:
        raise ToolChoiceError("Tools cannot be empty if tool choice is set to a specific "
                              "tool.", "tool_choice")
    if named is not None and named not in names:
        raise ToolChoiceError(f"Tool '{named[:64]}' not found in tools list.", "tool_choice")
    for i, tool in enumerate(tools):
        _check_parameters(tool, i)
    parallel = body.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise ToolChoiceError("parallel_tool_calls must be a boolean", "parallel_tool_calls")
    if choice != "required" and named is None:
        return None
    items = (_tool_schema(tools[names.index(named)]) if named is not None
             else {"type": "object", "anyOf": [_tool_schema(t) for t in tools]})
    schema: dict[str, Any] = {"type": "array", "minItems": 1, "items": items}
    if parallel is False:
        schema["maxItems"] = 1
    defs = tool_defs(tools) if named is None else {}
    if defs:
        schema["$defs"] = defs
    return Forcing(json.dumps(schema), named)


def tools_rendered(body: dict[str, Any], forcing: Forcing | None) -> list[Any] | None:
    """The tools the template renders, as SGLang's chat route picks them: none for
    ``tool_choice: "none"``, only the named one for a named choice, else all of them."""
    tools = body.get("tools") or None
    if body.get("tool_choice") == "none":
        return None
    if tools is None or forcing is None or forcing.name is None:
        return tools
    return [t for t in tools if t["function"]["name"] == forcing.name]


def parse_forced(text: str) -> list[tuple[str, str]] | None:
    """The calls of a forced answer as SGLang's ``_process_tool_calls`` reads them: a
    JSON array of ``{"name", "parameters"}`` (one object is one call; ``parameters``
    absent is ``{}``); None when ``text`` is not that."""
    try:
        value = json.loads(text)
    except (RecursionError, ValueError):
        return None
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, list) or too_deep(value):
        return None
    calls = []
    for item in value:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            return None
        calls.append((item["name"], json.dumps(item.get("parameters", {}),
                                               ensure_ascii=False)))
    return calls or None
