"""Anthropic Messages API <-> chat completions. Pure translation, no I/O.

``to_chat`` turns a Messages request into the chat request carrying the same
conversation (system, text, images, tool_use / tool_result, tools, sampling fields,
``output_config.format`` as a JSON-schema ``response_format``); fields that change
nothing a chat upstream can do (``metadata``, ``thinking``, ``output_config.effort``,
``context_management``, ``cache_control``, ``service_tier``) are accepted and left
out. ``anthropic_events`` turns the chat answer back into a Message.
"""

from __future__ import annotations

from typing import Any

import orjson

from ..errors import BadRequest

__all__ = ["STOP_REASONS", "to_chat"]

_SAMPLING = ("temperature", "top_p", "top_k")
_TOOL_CHOICES = {"auto": "auto", "any": "required", "none": "none"}
STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use",
                "function_call": "tool_use", "content_filter": "refusal"}
"""Chat ``finish_reason`` -> Messages ``stop_reason`` (a matched stop sequence aside)."""


def to_chat(body: dict[str, Any]) -> dict[str, Any]:
    """The chat completion request for Messages ``body``; ``BadRequest`` names the
    first field the translation cannot carry."""
    max_tokens = body.get("max_tokens")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise BadRequest("max_tokens: a positive integer is required", param="max_tokens")
    source = body.get("messages")
    if not isinstance(source, list) or not source:
        raise BadRequest("messages: a non-empty list is required", param="messages")
    messages: list[dict[str, Any]] = []
    system = _system_text(body.get("system"))
    if system:
        messages.append({"role": "system", "content": system})
    for message in source:
        messages.extend(_message(message))
    chat: dict[str, Any] = {"model": body.get("model"), "messages": messages,
                            "max_tokens": max_tokens}
    chat.update({key: body[key] for key in _SAMPLING if body.get(key) is not None})
    stops = body.get("stop_sequences")
    if stops is not None:
        if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
            raise BadRequest("stop_sequences: a list of strings is required",
                             param="stop_sequences")
        if stops:
            chat["stop"] = stops
    if body.get("tools"):
        chat["tools"] = [_tool(t) for t in _list(body["tools"], "tools")]
    _tool_choice(body.get("tool_choice"), chat)
    output = body.get("output_config")
    fmt = output.get("format") if isinstance(output, dict) else None
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        chat["response_format"] = {"type": "json_schema",
                                   "json_schema": {"name": "output", "schema": fmt.get("schema")}}
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise BadRequest("stream: a boolean is required", param="stream")
    if stream:
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}
    return chat


def _list(value: Any, param: str) -> list[Any]:
    if not isinstance(value, list):
        raise BadRequest(f"{param}: a list is required", param=param)
    return value


def _block_kind(block: Any, param: str) -> str:
    if isinstance(block, str):
        return "string"
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        raise BadRequest(f"{param}: each content block needs a string type", param=param)
    kind: str = block["type"]
    return kind


def _system_text(system: Any) -> str:
    if system is None or isinstance(system, str):
        return system or ""
    return "\n\n".join(_texts(system, "system", "system: only text blocks are supported"))


def _texts(blocks: Any, param: str, refusal: str) -> list[str]:
    """The texts of a list of text blocks; another block is a 400 (``refusal``, formatted
    with the block's ``kind``)."""
    texts = []
    for block in _list(blocks, param):
        kind = _block_kind(block, param)
        if kind != "text" or not isinstance(block.get("text"), str):
            raise BadRequest(refusal.format(kind=kind), param=param)
        texts.append(block["text"])
    return texts


def _message(message: Any) -> list[dict[str, Any]]:
    """One Messages turn -> chat messages (tool results become ``tool`` messages)."""
    if not isinstance(message, dict):
        raise BadRequest("messages: each message must be an object", param="messages")
    role = message.get("role")
    content = message.get("content")
    if role == "system":  # Claude Code puts one inside ``messages``
        return [{"role": "system", "content": _system_text(content)}]
    if role not in ("user", "assistant"):
        raise BadRequest(f"messages: unsupported role {role!r}", param="messages")
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    for block in _list(content, "messages"):
        kind = _block_kind(block, "messages")
        if kind == "text":
            if not isinstance(block.get("text"), str):
                raise BadRequest("messages: a text block needs a string text", param="messages")
            parts.append({"type": "text", "text": block["text"]})
        elif kind == "image" and role == "user":
            parts.append({"type": "image_url", "image_url": {"url": _image_url(block)}})
        elif kind == "tool_use" and role == "assistant":
            calls.append(_call(block))
        elif kind == "tool_result" and role == "user":
            results.append(_result(block))
        elif kind in ("thinking", "redacted_thinking") and role == "assistant":
            continue  # the upstream's reasoning is not sent back
        else:
            raise BadRequest(f"messages: unsupported {role} content block {kind!r}",
                             param="messages")
    if role == "assistant":
        text = "".join(p["text"] for p in parts)
        if calls:
            return [{"role": role, "content": text or None, "tool_calls": calls}]
        return [{"role": role, "content": text}]
    if not parts:
        return results
    texts_only = all(p["type"] == "text" for p in parts)
    return [*results, {"role": role,
                       "content": "".join(p["text"] for p in parts) if texts_only else parts}]


def _image_url(block: dict[str, Any]) -> str:
    source = block.get("source")
    if isinstance(source, dict) and source.get("type") == "base64":
        return f"data:{source.get('media_type')};base64,{source.get('data')}"
    if isinstance(source, dict) and source.get("type") == "url":
        return str(source.get("url"))
    raise BadRequest("messages: an image needs a base64 or url source", param="messages")


def _call(block: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str):
        raise BadRequest("messages: tool_use needs a string id and name", param="messages")
    arguments = orjson.dumps(block.get("input") or {}).decode()
    return {"id": block["id"], "type": "function",
            "function": {"name": block["name"], "arguments": arguments}}


def _result(block: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(block.get("tool_use_id"), str):
        raise BadRequest("messages: tool_result needs a string tool_use_id", param="messages")
    content = block.get("content")
    if content is None or isinstance(content, str):
        text = content or ""
    else:
        text = "".join(_texts(content, "messages",
                              "messages: unsupported tool_result block {kind!r}"))
    return {"role": "tool", "tool_call_id": block["tool_use_id"], "content": text}


def _tool(tool: Any) -> dict[str, Any]:
    if (not isinstance(tool, dict) or not isinstance(tool.get("name"), str)
            or not isinstance(tool.get("input_schema"), dict)):
        raise BadRequest("tools: only custom tools with a name and an input_schema are "
                         "supported", param="tools")
    function: dict[str, Any] = {"name": tool["name"], "parameters": tool["input_schema"]}
    if isinstance(tool.get("description"), str):
        function["description"] = tool["description"]
    return {"type": "function", "function": function}


def _tool_choice(choice: Any, chat: dict[str, Any]) -> None:
    if choice is None:
        return
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind in _TOOL_CHOICES:
        chat["tool_choice"] = _TOOL_CHOICES[kind]
    elif kind == "tool" and isinstance(choice.get("name"), str):
        chat["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
    else:
        raise BadRequest("tool_choice: type must be auto, any, tool (with a name) or none",
                         param="tool_choice")
    if isinstance(choice, dict) and choice.get("disable_parallel_tool_use") is True:
        chat["parallel_tool_calls"] = False
