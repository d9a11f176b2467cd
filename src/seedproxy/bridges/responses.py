"""Responses API <-> chat completions, for upstreams whose /v1/responses drops ``seed``.
Pure translation, no I/O: ``to_chat`` is the chat request carrying the same
conversation (the tools as ``responses_tools`` renders them); ``responses_events`` turns
the chat answer back into a Responses object.
"""

from __future__ import annotations

from typing import Any

from ..errors import BadRequest
from ..wire.shapes import reasoning_tokens
from .responses_tools import call_arguments, plan_tools

__all__ = ["chat_usage_to_responses", "left_out_tools", "to_chat", "wants_logprobs"]

_PASS_THROUGH = ("model", "temperature", "top_p", "presence_penalty", "frequency_penalty",
                 "parallel_tool_calls", "user", "seed", "stream")
_TEXT_PARTS = ("input_text", "output_text", "text", "refusal", "summary_text")


def to_chat(body: dict[str, Any]) -> dict[str, Any]:
    """Return the chat completion request for Responses ``body``; ``BadRequest`` names
    the first field or input item the translation cannot carry."""
    if body.get("previous_response_id") is not None:
        raise BadRequest("previous_response_id is not supported: send the whole conversation "
                         "as input", param="previous_response_id")
    messages: list[dict[str, Any]] = []
    instructions = body.get("instructions")
    if isinstance(instructions, str) and instructions:
        messages.append({"role": "system", "content": instructions})
    elif isinstance(instructions, list):
        messages.extend(_input_messages(instructions))
    source = body.get("input")
    if isinstance(source, str):
        messages.append({"role": "user", "content": source})
    else:
        messages.extend(_input_messages(source or []))
    if not messages:
        raise BadRequest("input must hold at least one message", param="input")
    chat: dict[str, Any] = {k: body[k] for k in _PASS_THROUGH if body.get(k) is not None}
    chat["messages"] = messages
    if body.get("max_output_tokens") is not None:
        chat["max_tokens"] = body["max_output_tokens"]
    plan = plan_tools(body.get("tools"))
    if plan.chat:
        chat["tools"] = plan.chat
    choice = body.get("tool_choice")
    if isinstance(choice, str):
        chat["tool_choice"] = choice
    elif isinstance(choice, dict) and choice.get("type") in ("function", "custom"):
        name, _ = call_arguments({"name": choice.get("name"),
                                  "namespace": choice.get("namespace")})
        chat["tool_choice"] = {"type": "function", "function": {"name": name}}
    fmt = (body.get("text") or {}).get("format") if isinstance(body.get("text"), dict) else None
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        schema = {k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}
        chat["response_format"] = {"type": "json_schema", "json_schema": schema}
    elif isinstance(fmt, dict) and fmt.get("type") == "json_object":
        chat["response_format"] = {"type": "json_object"}
    if wants_logprobs(body):
        chat["logprobs"] = True
        if isinstance(body.get("top_logprobs"), int):
            chat["top_logprobs"] = body["top_logprobs"]
    if chat.get("stream"):
        chat["stream_options"] = {"include_usage": True}
    return chat


def wants_logprobs(body: dict[str, Any]) -> bool:
    include = body.get("include") or []
    return "message.output_text.logprobs" in include or isinstance(body.get("top_logprobs"), int)


def _input_messages(items: Any) -> list[dict[str, Any]]:
    if not isinstance(items, list):
        raise BadRequest("input must be a string or a list of items", param="input")
    messages: list[dict[str, Any]] = []
    for item in items:
        if not isinstance(item, dict):
            raise BadRequest("each input item must be an object", param="input")
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "assistant", "system", "developer"):
                raise BadRequest(f"unsupported message role {role!r}", param="input")
            messages.append({"role": "system" if role == "developer" else role,
                             "content": _content(item.get("content"))})
        elif kind in ("function_call", "custom_tool_call"):
            name, arguments = call_arguments(item)
            call = {"id": item.get("call_id"), "type": "function",
                    "function": {"name": name, "arguments": arguments}}
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)  # one turn: text + calls
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind in ("function_call_output", "custom_tool_call_output"):
            output = item.get("output")
            text = output if isinstance(output, str) else _text_of(output)
            messages.append({"role": "tool", "tool_call_id": item.get("call_id"), "content": text})
        elif kind != "reasoning":
            raise BadRequest(f"unsupported input item type {kind!r}", param="input")
    return messages


def _content(content: Any) -> Any:
    if isinstance(content, str) or content is None:
        return content or ""
    if not isinstance(content, list):
        raise BadRequest("message content must be a string or a list of parts", param="input")
    parts: list[dict[str, Any]] = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in _TEXT_PARTS:
            parts.append({"type": "text", "text": part.get("text", "")})
        elif kind == "input_image" and part.get("image_url"):
            parts.append({"type": "image_url", "image_url": {"url": part["image_url"]}})
        else:
            raise BadRequest(f"unsupported content part {kind!r}", param="input")
    if all(p["type"] == "text" for p in parts):
        return "".join(p["text"] for p in parts)
    return parts


def _text_of(parts: Any) -> str:
    if not isinstance(parts, list):
        return "" if parts is None else str(parts)
    return "".join(p.get("text", "") for p in parts if isinstance(p, dict))


def left_out_tools(body: dict[str, Any]) -> list[str]:
    """The types of the tools in ``body`` that ``to_chat`` leaves out (hosted tools)."""
    return plan_tools(body.get("tools")).left_out


def chat_usage_to_responses(usage: Any) -> dict[str, Any] | None:
    if not isinstance(usage, dict):
        return None
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    return {"input_tokens": usage.get("prompt_tokens", 0),
            "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
            "output_tokens": usage.get("completion_tokens", 0),
            "output_tokens_details": {"reasoning_tokens": reasoning_tokens(usage)},
            "total_tokens": usage.get("total_tokens", 0)}
