"""The texts a branch's links are inferred from, read from a recorded interaction in
its client's protocol (chat completions, Anthropic Messages, Responses).

Read at export only, from the interactions the export reads anyway: the user texts a
request sent, the answer text and tool calls its response returned, and whether it
offered tools. Unknown shapes read as nothing (no link is inferred from them).
"""

from __future__ import annotations

import json
from typing import Any

from .interaction import Interaction

__all__ = ["Call", "answer_text", "offers_tools", "tool_calls", "user_texts"]

Call = tuple[str, list[str]]
"""A tool call: its id, and the string values of its arguments (top level)."""


def _texts(content: Any) -> list[str]:
    """A message content's texts: a string, or each text part's text (any type of
    text part: ``text``, ``input_text``, ``output_text``)."""
    if isinstance(content, str):
        return [content]
    if not isinstance(content, list):
        return []
    return [str(p["text"]) for p in content
            if isinstance(p, dict) and isinstance(p.get("text"), str)
            and str(p.get("type", "text")).endswith("text")]


def user_texts(interaction: Interaction) -> list[str]:
    """The texts of the request's first user message, stripped, in order."""
    request = interaction.request if isinstance(interaction.request, dict) else {}
    messages = request.get("messages")
    if messages is None:  # Responses: ``input`` is a string or items
        messages = request.get("input")
        if isinstance(messages, str):
            return [messages.strip()]
    for message in messages if isinstance(messages, list) else []:
        if isinstance(message, dict) and message.get("role") == "user":
            return [t.strip() for t in _texts(message.get("content")) if t.strip()]
    return []


def offers_tools(interaction: Interaction) -> bool:
    request = interaction.request if isinstance(interaction.request, dict) else {}
    return bool(request.get("tools"))


def _answer_parts(interaction: Interaction) -> list[Any]:
    """The answer's content parts or items, whichever protocol."""
    response = interaction.response if isinstance(interaction.response, dict) else {}
    choices = response.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        message = choices[0].get("message") or {}
        parts: list[Any] = [{"type": "text", "text": message.get("content") or ""}]
        for call in message.get("tool_calls") or []:
            fn = call.get("function") or {}
            parts.append({"type": "function_call", "call_id": call.get("id"),
                          "arguments": fn.get("arguments")})
        return parts
    if isinstance(response.get("content"), list):  # Anthropic Messages
        return list(response["content"])
    items: list[Any] = []
    for item in response.get("output") or []:  # Responses
        if isinstance(item, dict) and item.get("type") == "message":
            items += item.get("content") or []
        else:
            items.append(item)
    return items


def answer_text(interaction: Interaction) -> str:
    """The answer's text (choice 0), stripped."""
    return "".join(_texts(_answer_parts(interaction))).strip()


def tool_calls(interaction: Interaction) -> list[Call]:
    """The answer's tool calls (choice 0), each with its arguments' string values."""
    out: list[Call] = []
    for part in _answer_parts(interaction):
        if not isinstance(part, dict):
            continue
        if part.get("type") == "tool_use":
            arguments: Any = part.get("input")
            call_id = part.get("id")
        elif part.get("type") == "function_call":
            arguments, call_id = part.get("arguments"), part.get("call_id")
            if isinstance(arguments, str):
                try:
                    arguments = json.loads(arguments)
                except (ValueError, RecursionError):  # not JSON, or too deep to read
                    arguments = {"": arguments}
        else:
            continue
        values = [v.strip() for v in (arguments or {}).values()
                  if isinstance(v, str) and v.strip()] if isinstance(arguments, dict) else []
        out.append((str(call_id), values))
    return out
