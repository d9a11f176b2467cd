"""The Responses object around a bridged answer: every field the published schemas
require (OpenAI's ``Response``, Open Responses' ``ResponseResource``), each with the
value that holds for a request the proxy served through a chat upstream.

Pure, no I/O, no clock: ``completed_at`` comes in from the caller. Settings the chat
translation carries (``temperature``, ``top_p``, penalties, ``top_logprobs``, tools,
``text.format``...) echo the request, with the OpenAI defaults where the request left
them out; settings it does not carry show what was used instead: nothing stored
(``store: false``), nothing run in the background, no truncation, no reasoning
configuration, no tool-call cap.
"""

from __future__ import annotations

from typing import Any

__all__ = ["envelope"]

_TOOL_CHOICES = ("none", "auto", "required")


def _number(value: Any, default: float) -> float | int:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value
    return default


def _text_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _tool(tool: Any) -> Any:
    """A function tool as the Response shows it: every field present."""
    if not isinstance(tool, dict) or tool.get("type") != "function":
        return tool  # namespace, custom and hosted tools: shown as the request gave them
    strict = tool.get("strict")
    return {"type": "function", "name": tool.get("name"),
            "description": _text_or_none(tool.get("description")),
            "parameters": tool.get("parameters") if isinstance(tool.get("parameters"), dict)
            else None,
            "strict": strict if isinstance(strict, bool) else None}


def _tool_choice(choice: Any) -> Any:
    if isinstance(choice, str) and choice in _TOOL_CHOICES:
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function":
        return {"type": "function", "name": choice.get("name")}
    return "auto"


def _text(body: dict[str, Any]) -> dict[str, Any]:
    """``text`` with its ``format`` whole (a JSON schema format names every field)."""
    text = body.get("text")
    given: dict[str, Any] = text if isinstance(text, dict) else {}
    fmt = given.get("format")
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    out: dict[str, Any] = {k: v for k, v in given.items() if k == "verbosity"}
    if kind == "json_schema":
        assert isinstance(fmt, dict)
        schema = fmt.get("schema")
        out["format"] = {"type": "json_schema", "name": str(fmt.get("name") or ""),
                         "description": _text_or_none(fmt.get("description")),
                         "schema": schema if isinstance(schema, dict) else None,
                         "strict": fmt.get("strict") is True}
    elif kind == "json_object":
        out["format"] = {"type": "json_object"}
    else:
        out["format"] = {"type": "text"}
    return out


def envelope(
    body: dict[str, Any], response_id: str, created: Any, model: Any, *, status: str,
    output: list[dict[str, Any]], usage: dict[str, Any] | None, finish_reason: Any = None,
    completed_at: int | None = None,
) -> dict[str, Any]:
    """A Responses object echoing the request's settings, as OpenAI's server does.

    A ``completed`` answer cut by ``max_output_tokens`` shows ``incomplete``;
    ``completed_at`` is shown only on a ``completed`` one (never before ``created_at``).
    """
    incomplete = status == "completed" and finish_reason == "length"
    shown = "incomplete" if incomplete else status
    created_at = int(created) if isinstance(created, int | float) else 0
    top_logprobs = body.get("top_logprobs")
    max_output = body.get("max_output_tokens")
    return {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "completed_at": (max(completed_at, created_at)
                         if shown == "completed" and completed_at is not None else None),
        "status": shown,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
        "instructions": body.get("instructions"),
        "max_output_tokens": max_output if isinstance(max_output, int) else None,
        "max_tool_calls": None,
        "model": model if isinstance(model, str) else str(body.get("model") or ""),
        "output": output,
        "parallel_tool_calls": body.get("parallel_tool_calls") is not False,
        "previous_response_id": None,
        "reasoning": {"effort": None, "summary": None},
        "temperature": _number(body.get("temperature"), 1.0),
        "top_p": _number(body.get("top_p"), 1.0),
        "presence_penalty": _number(body.get("presence_penalty"), 0.0),
        "frequency_penalty": _number(body.get("frequency_penalty"), 0.0),
        "top_logprobs": (top_logprobs if isinstance(top_logprobs, int)
                         and not isinstance(top_logprobs, bool) else 0),
        "tool_choice": _tool_choice(body.get("tool_choice", "auto")),
        "tools": [_tool(t) for t in body.get("tools") or []],
        "text": _text(body),
        "truncation": "disabled",
        "store": False,
        "background": False,
        "service_tier": "default",
        "user": _text_or_none(body.get("user")),
        "safety_identifier": _text_or_none(body.get("safety_identifier")),
        "prompt_cache_key": _text_or_none(body.get("prompt_cache_key")),
        "metadata": body.get("metadata") or {},
        "usage": usage,
    }
