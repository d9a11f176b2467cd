"""Keys that say whether two messages are the same turn, for matching a history.

A key is a digest of a message normalised the way SDKs re-send it: content stripped
(None = "", one text part = its text), tool calls as (name, arguments parsed and
re-dumped with sorted keys), ids and reasoning left out. Everything else the template
could render is in the key: several content parts (each text part's text, any other
part whole) and every other field with a value (null, ``[]`` and ``{}`` are no value,
as SDKs re-send ``refusal: null``), so an earlier message that gained a part or a field
no longer matches, and the request is rendered in full (a new branch, or the 400 a
fresh session gives). Reasoning is checked on its own and only when the client sent it
back (agents commonly drop it). Each of these normalisations is a named matcher, and
what it changed in a message is recorded next to its key (``facets.py``). Arguments
that are not JSON are keyed as text; arguments that are JSON but nest deeper than
``nesting.MAX_DEPTH`` (or past ``json``'s recursion limit), or hold an integer past
Python's digit limit, are a 400 (before any index is taken).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import orjson

from ..nesting import too_deep
from ..template_input import unreadable_arguments

__all__ = ["arguments_value", "content_of", "context_key", "message_key", "reasoning_key",
           "reasoning_of", "unreadable_arguments"]

_SIZE = 16
_KEYED = frozenset({"role", "content", "tool_calls", "name"})
_UNKEYED = frozenset({"id", "reasoning_content", "reasoning"})  # ids; reasoning apart
_TEXT_PARTS = frozenset({"text", "input_text"})


def _digest(value: Any) -> str:
    data = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    return hashlib.blake2b(data, digest_size=_SIZE).hexdigest()


def _is_text(part: Any) -> bool:
    return (isinstance(part, dict) and part.get("type") in _TEXT_PARTS
            and isinstance(part.get("text"), str))


def content_of(content: Any) -> str | list[Any]:
    """A string (stripped) for a string, null or a single text part; else the parts,
    each text part as its text, in order."""
    if isinstance(content, str):
        return content.strip()
    if not isinstance(content, list) or not content:
        return ""
    if len(content) == 1 and _is_text(content[0]):
        return str(content[0]["text"]).strip()
    return [part["text"] if _is_text(part) else part for part in content]


def _fields(message: dict[str, Any]) -> dict[str, Any]:
    """The message's other fields that hold a value."""
    return {k: v for k, v in message.items()
            if k not in _KEYED and k not in _UNKEYED and v is not None and v != [] and v != {}}


def arguments_value(raw: Any) -> Any:
    if not isinstance(raw, str):
        return raw
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        return raw.strip()
    except (RecursionError, ValueError):  # too deep for json; an int over 4,300 digits
        raise unreadable_arguments() from None
    if too_deep(value):
        raise unreadable_arguments()
    return value


def _calls(calls: Any) -> list[Any]:
    if not isinstance(calls, list):
        return []
    out = []
    for call in calls:
        fn = call.get("function") if isinstance(call, dict) else None
        if isinstance(fn, dict):
            out.append([fn.get("name"), arguments_value(fn.get("arguments"))])
        else:
            out.append(call)
    return out


def message_key(message: dict[str, Any]) -> str:
    """The digest of ``message`` without ids and reasoning. A plain-text message with
    no other field keys as [role, text, calls, name]: a fixed key, so sessions stored
    earlier keep matching."""
    content, extra = content_of(message.get("content")), _fields(message)
    text = content if isinstance(content, str) else ""
    keyed: list[Any] = [message.get("role"), text, _calls(message.get("tool_calls")),
                        message.get("name")]
    if isinstance(content, list) or extra:
        keyed.append({"parts": content if isinstance(content, list) else None,
                      "fields": extra})
    try:
        return _digest(keyed)
    except (TypeError, orjson.JSONEncodeError):
        return _digest([message.get("role"), repr(message)])


def reasoning_of(message: dict[str, Any]) -> str:
    for key in ("reasoning_content", "reasoning"):
        value = message.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return ""


def reasoning_key(text: str) -> str | None:
    return _digest(text.strip()) if text.strip() else None


def context_key(body: dict[str, Any]) -> str:
    """What the template renders outside the messages: tools, template kwargs and a
    ``reasoning_effort`` (only when set, so the keys of requests without it stay)."""
    effort = body.get("reasoning_effort")
    try:
        return _digest([body.get("tools") or None, body.get("chat_template_kwargs") or None,
                        *([] if effort is None else [effort])])
    except (TypeError, orjson.JSONEncodeError):
        return _digest(repr(body.get("tools")))
