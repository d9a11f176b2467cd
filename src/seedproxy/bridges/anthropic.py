"""Anthropic Messages API <-> chat completions. Pure translation, no I/O.

``to_chat`` turns a Messages request into the chat request carrying the same
conversation (system, text, images, tool_use / tool_result, tools, sampling fields,
``output_config.format`` as a JSON-schema ``response_format``); fields that change
nothing a chat upstream can do (``metadata``, ``thinking``, ``output_config.effort``,
``context_management``, ``cache_control``, ``service_tier``) are accepted and left
out. ``anthropic_events`` turns the chat answer back into a Message. Ids derive from
the request's seed (``MessageIds``), never from a clock or randomness.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from ..errors import BadRequest
from ..nesting import too_deep
from ..wire.shapes import reasoning_tokens

__all__ = [
    "MessageIds",
    "STOP_REASONS",
    "delta_usage",
    "message_usage",
    "stop_details",
    "stop_reason",
    "text_block",
    "to_chat",
    "tool_input",
    "tool_use_block",
]

_SAMPLING = ("temperature", "top_p", "top_k")
_TOOL_CHOICES = {"auto": "auto", "any": "required", "none": "none"}
STOP_REASONS = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}
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
    for key in _SAMPLING:
        if body.get(key) is not None:
            chat[key] = body[key]
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
    texts = []
    for block in _list(system, "system"):
        if _block_kind(block, "system") != "text" or not isinstance(block.get("text"), str):
            raise BadRequest("system: only text blocks are supported", param="system")
        texts.append(block["text"])
    return "\n\n".join(texts)


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
    out: list[dict[str, Any]] = list(results)
    if role == "assistant":
        text = "".join(p["text"] for p in parts)
        if calls:
            out.append({"role": "assistant", "content": text or None, "tool_calls": calls})
        else:
            out.append({"role": "assistant", "content": text})
    elif parts:
        texts_only = all(p["type"] == "text" for p in parts)
        out.append({"role": "user",
                    "content": "".join(p["text"] for p in parts) if texts_only else parts})
    return out


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
        texts = []
        for part in _list(content, "messages"):
            kind = _block_kind(part, "messages")
            if kind != "text" or not isinstance(part.get("text"), str):
                raise BadRequest(f"messages: unsupported tool_result block {kind!r}",
                                 param="messages")
            texts.append(part["text"])
        text = "".join(texts)
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


class MessageIds:
    """Ids of one answer: ``msg_...`` and ``toolu_...``, from the seed when there is one
    (replays get the same ids), else from the upstream's own ids."""

    def __init__(self, seed: int | None, upstream_id: Any, body: dict[str, Any]) -> None:
        # The turn (how many messages came in) keeps ids distinct under a fixed seed.
        turn = len(body.get("messages") or [])
        basis = f"seed:{seed}:{turn}" if seed is not None else f"upstream:{upstream_id}"
        self._basis = basis
        self.message = "msg_" + _hex(basis, 24)

    def tool(self, position: int) -> str:
        return "toolu_" + _hex(f"{self._basis}:{position}", 24)


def _hex(text: str, size: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:size]


def tool_input(arguments: Any) -> dict[str, Any]:
    """A tool call's JSON arguments as the ``input`` object; arguments that are not a
    JSON object, or nest deeper than ``nesting.MAX_DEPTH`` (a model's broken output), are kept
    whole under ``_raw_arguments``."""
    if not isinstance(arguments, str) or not arguments.strip():
        return {}
    try:
        parsed = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return {"_raw_arguments": arguments}
    if not isinstance(parsed, dict) or too_deep(parsed):
        return {"_raw_arguments": arguments}
    return parsed


def stop_reason(
    finish_reason: Any, matched: Any, body: dict[str, Any]
) -> tuple[str | None, str | None]:
    """(stop_reason, stop_sequence) for a chat choice's finish."""
    if finish_reason is None:
        return None, None
    stops = body.get("stop_sequences") or []
    if finish_reason == "stop" and isinstance(matched, str) and matched in stops:
        return "stop_sequence", matched
    return STOP_REASONS.get(str(finish_reason), "end_turn"), None


def delta_usage(usage: Any) -> dict[str, Any]:
    """``message_delta``'s usage (``MessageDeltaUsage``): token counts, no server tools;
    ``output_tokens_details.thinking_tokens`` the upstream's reasoning tokens (0 where it
    counts none), at most ``output_tokens``."""
    usage = usage if isinstance(usage, dict) else {}
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    return {
        "input_tokens": int(usage.get("prompt_tokens") or 0),
        "output_tokens": int(usage.get("completion_tokens") or 0),
        "output_tokens_details": {"thinking_tokens": reasoning_tokens(usage)},
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": int(cached),
        "server_tool_use": None,
    }


def message_usage(usage: Any) -> dict[str, Any]:
    """A Message's ``Usage``: the upstream's counts; prefix-cache hits are cache reads,
    and nothing is written to a cache Anthropic's way (``cache_creation`` zeros)."""
    return {
        **delta_usage(usage),
        "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
        "inference_geo": None,
        "service_tier": "standard",
    }


def stop_details(reason: str | None) -> dict[str, Any] | None:
    """``stop_details``: a refusal's (with no category or explanation known), else null."""
    if reason != "refusal":
        return None
    return {"type": "refusal", "category": None, "explanation": None}


def text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text, "citations": None}


def tool_use_block(block_id: str, name: str, tool_input: dict[str, Any]) -> dict[str, Any]:
    """A ``tool_use`` block; the model itself made the call (``caller: direct``)."""
    return {"type": "tool_use", "id": block_id, "name": name, "input": tool_input,
            "caller": {"type": "direct"}}
