"""The Responses API's tools as a chat model sees them, and its calls back as items.
Pure, no I/O; the policy is docs/routes.md's "Responses tools" table:

- ``function``: as it is. ``namespace``: each function (or custom tool) inside it as a
  chat function ``flat_name(namespace, name)``, its calls back with ``name`` and
  ``namespace`` apart; a resent call is flattened the same way, so a resent history
  renders as it was sampled.
- ``custom`` (freeform): a chat function with one string parameter ``input`` (the
  grammar quoted in its description, not enforced); its call comes back as a
  ``custom_tool_call`` with that ``input``.
- any other type is a tool the server would run: left out, and named in the record
  (``left_out_tools``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ..errors import BadRequest

__all__ = ["Target", "ToolPlan", "call_arguments", "call_output_item", "custom_input",
           "flat_name", "plan_tools"]

_DELIMITER = "__"
_INPUT = "input"


def flat_name(namespace: str | None, name: str) -> str:
    """The chat function name of tool ``name`` in ``namespace`` (None: no namespace)."""
    if not namespace:
        return name
    return namespace.rstrip("_") + _DELIMITER + name.lstrip("_")


@dataclass(frozen=True, slots=True)
class Target:
    """A tool the model may call, as the client named it."""

    name: str
    namespace: str | None
    custom: bool


@dataclass(slots=True)
class ToolPlan:
    """The chat tools for a Responses ``tools`` list, which chat name is which tool,
    and the types left out (in the order given, each once)."""

    chat: list[dict[str, Any]] = field(default_factory=list)
    calls: dict[str, Target] = field(default_factory=dict)
    left_out: list[str] = field(default_factory=list)


def plan_tools(tools: Any) -> ToolPlan:
    """The plan for ``tools``; ``BadRequest`` for a tool that is not an object with a
    string ``type``, or a namespace without a name and a list of tools."""
    plan = ToolPlan()
    if tools is None:
        return plan
    if not isinstance(tools, list):
        raise BadRequest("tools must be a list", param="tools")
    for tool in tools:
        kind = tool.get("type") if isinstance(tool, dict) else None
        if not isinstance(kind, str):
            raise BadRequest("each tool must be an object with a string type", param="tools")
        if kind in ("function", "custom"):
            _add(plan, tool, None)
        elif kind == "namespace":
            namespace, inner = tool.get("name"), tool.get("tools")
            if not isinstance(namespace, str) or not namespace or not isinstance(inner, list):
                raise BadRequest("a namespace tool needs a name and a list of tools",
                                 param="tools")
            for member in inner:
                member_kind = member.get("type") if isinstance(member, dict) else None
                if member_kind not in ("function", "custom"):
                    raise BadRequest("a namespace holds function and custom tools, "
                                     f"not {member_kind!r}", param="tools")
                _add(plan, member, namespace)
        elif kind not in plan.left_out:
            plan.left_out.append(kind)
    return plan


def _add(plan: ToolPlan, tool: dict[str, Any], namespace: str | None) -> None:
    name = tool.get("name")
    if not isinstance(name, str) or not name:
        raise BadRequest(f"a {tool['type']} tool needs a name", param="tools")
    custom = tool["type"] == "custom"
    chat_name = flat_name(namespace, name)
    if custom:
        function = {"name": chat_name, "description": _custom_description(tool),
                    "parameters": {"type": "object",
                                   "properties": {_INPUT: {"type": "string"}},
                                   "required": [_INPUT], "additionalProperties": False}}
    else:
        function = {"name": chat_name,
                    **{k: tool[k] for k in ("description", "parameters", "strict") if k in tool}}
    plan.chat.append({"type": "function", "function": function})
    plan.calls[chat_name] = Target(name, namespace, custom)


def _custom_description(tool: dict[str, Any]) -> str:
    """A freeform tool's description for a chat model: its own, then what ``input`` is."""
    described = tool.get("description")
    text = described.strip() + "\n\n" if isinstance(described, str) and described.strip() else ""
    fmt = tool.get("format")
    if isinstance(fmt, dict) and fmt.get("type") == "grammar":
        syntax = fmt.get("syntax")
        definition = fmt.get("definition")
        return (text + f"Write the raw input as the string `{_INPUT}`; it must match this "
                f"{syntax} grammar:\n{definition}")
    return text + f"Write the raw input as the string `{_INPUT}` (free text)."


def call_arguments(item: dict[str, Any]) -> tuple[str, str]:
    """The chat (name, arguments) of a resent ``function_call`` or ``custom_tool_call``."""
    name = item.get("name")
    namespace = item.get("namespace")
    chat_name = flat_name(namespace if isinstance(namespace, str) else None,
                          name if isinstance(name, str) else "")
    if item.get("type") == "custom_tool_call":
        text = item.get(_INPUT)
        return chat_name, json.dumps({_INPUT: text if isinstance(text, str) else ""},
                                     ensure_ascii=False)
    arguments = item.get("arguments")
    return chat_name, arguments if isinstance(arguments, str) else ""


def custom_input(arguments: str) -> str:
    """A freeform call's raw input: the ``input`` string of the arguments, else the
    arguments as the model wrote them."""
    try:
        value = json.loads(arguments)
    except (json.JSONDecodeError, RecursionError):
        return arguments
    if isinstance(value, dict) and isinstance(value.get(_INPUT), str):
        return str(value[_INPUT])
    return arguments


def call_output_item(plan: ToolPlan, call_id: str, chat_name: str, arguments: str,
                     status: str) -> dict[str, Any]:
    """The Responses output item of the model's call to ``chat_name``: a
    ``function_call`` (with ``status``), or a ``custom_tool_call`` for a freeform tool
    (OpenAI's has no status); the tool's own name, with its ``namespace`` when it has
    one. A name no tool has stays as written."""
    known = plan.calls.get(chat_name)
    if known is not None and known.custom:
        item: dict[str, Any] = {"id": f"ctc_{call_id}", "type": "custom_tool_call",
                                "call_id": call_id, "name": known.name,
                                _INPUT: custom_input(arguments)}
    else:
        item = {"id": f"fc_{call_id}", "type": "function_call", "call_id": call_id,
                "name": known.name if known is not None else chat_name,
                "arguments": arguments, "status": status}
    if known is not None and known.namespace is not None:
        item["namespace"] = known.namespace
    return item
