"""Keys that say whether two messages are the same turn, for matching a history.

A key is a digest of a message normalised the way SDKs re-send it: content stripped
(None = "", one text part = its text), tool calls as (name, arguments parsed and
re-dumped with sorted keys), ids and reasoning left out. Everything else the template
could render is in the key: several content parts (each text part's text, any other
part whole) and every other field with a value (null, ``[]`` and ``{}`` are no value,
as SDKs re-send ``refusal: null``), so an earlier message that gained a part or a field
no longer matches, and the request is rendered in full. Reasoning is checked on its
own and only when the client sent it back (agents commonly drop it). Arguments that
are not JSON are keyed as text; arguments that are JSON but nest deeper than
``nesting.MAX_DEPTH`` (or past ``json``'s limits) are a 400 (before any index is taken).

Each normalisation is a named matcher (``MATCHERS``; docs/tito.md says what each
ignores), and each is provably the same conversation to the model. Next to its key a
message records its *facets*: for each matcher whose normalisation changed something
in it, a one-letter tag (``_TAGS``) and a short digest of what it changed (``entry``:
``key``, or ``key|facets``). Two entries with one key are the same message to the
template; ``differences`` names the matchers whose facets differ. An entry reads in
O(its length): the cost of a turn stays what it adds.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Sequence
from typing import Any

import orjson

from ..errors import ConfigError
from ..nesting import too_deep
from ..template_input import unreadable_arguments

__all__ = ["MATCHERS", "MatchResult", "arguments_value", "content_of", "context_key",
           "differences", "entry", "entry_key", "facets", "history_differences",
           "matchers_of", "message_key", "reasoning_key", "reasoning_of"]

MATCHERS: tuple[str, ...] = ("tool_arguments_json", "content_null_empty",
                             "content_whitespace", "content_parts", "reasoning_dropped",
                             "harness_metadata")
_TAGS = {"a": "tool_arguments_json", "n": "content_null_empty", "w": "content_whitespace",
         "p": "content_parts", "r": "reasoning_dropped", "m": "harness_metadata"}
_NO_VALUE_SKIPPED = frozenset({"content", "tool_calls", "reasoning_content", "reasoning"})

MatchResult = frozenset[str] | None
"""The matchers that mapped a message (empty: byte-identical), or None: no match."""

_SIZE = 16
_KEYED = frozenset({"role", "content", "tool_calls", "name"})
_UNKEYED = frozenset({"id", "reasoning_content", "reasoning"})  # ids; reasoning apart
_TEXT_PARTS = frozenset({"text", "input_text"})


def _digest(value: Any, size: int = _SIZE) -> str:
    data = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    return hashlib.blake2b(data, digest_size=size).hexdigest()


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


def _functions(message: dict[str, Any]) -> list[tuple[Any, Any]]:
    """Each tool call, and its ``function`` (None when that is not an object)."""
    calls = message.get("tool_calls")
    return [(c, c.get("function") if isinstance(c, dict) and isinstance(
        c.get("function"), dict) else None) for c in calls] if isinstance(calls, list) else []


def message_key(message: dict[str, Any]) -> str:
    """The digest of ``message`` without ids and reasoning. A plain-text message with
    no other field keys as [role, text, calls, name]: a fixed key, so sessions stored
    earlier keep matching."""
    content, extra = content_of(message.get("content")), _fields(message)
    text = content if isinstance(content, str) else ""
    calls = [[fn.get("name"), arguments_value(fn.get("arguments"))] if fn is not None
             else call for call, fn in _functions(message)]
    keyed: list[Any] = [message.get("role"), text, calls, message.get("name")]
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


def matchers_of(setting: str) -> frozenset[str]:
    """The matchers a ``tito_matchers`` setting turns on: ``default`` (every one),
    ``strict`` (none: only a byte-identical history extends a turn), or a
    comma-separated list of names."""
    if setting == "default":
        return frozenset(MATCHERS)
    if setting == "strict":
        return frozenset()
    names = frozenset(n.strip() for n in setting.split(",") if n.strip())
    unknown = sorted(names - set(MATCHERS))
    if unknown or not names:
        raise ConfigError(f"unknown --tito-matchers {setting!r}: use default, strict or "
                          "names from " + ", ".join(MATCHERS))
    return names


def _short(value: Any) -> str:
    return _digest(value, 4)


def _arguments_facet(message: dict[str, Any]) -> list[str] | None:
    """The raw arguments when any of them is not the compact JSON it is keyed as."""
    def changed(raw: str) -> bool:
        value = arguments_value(raw)
        if isinstance(value, str) and value == raw.strip():  # not JSON: keyed as text
            return raw != value
        return raw != json.dumps(value, separators=(",", ":"), ensure_ascii=False)

    raws = [fn["arguments"] for _, fn in _functions(message)
            if fn is not None and isinstance(fn.get("arguments"), str)]
    return raws if any(changed(raw) for raw in raws) else None


def _text(content: Any) -> str | None:
    if isinstance(content, str):
        return content
    if isinstance(content, list) and len(content) == 1 and _is_text(content[0]):
        return str(content[0]["text"])
    return None


def _metadata(message: dict[str, Any]) -> list[Any]:
    found: list[Any] = []
    if message.get("id") is not None:
        found.append(["id", message["id"]])
    calls = message.get("tool_calls")
    for call in calls if isinstance(calls, list) else []:
        if isinstance(call, dict):
            found.append(["call", {k: v for k, v in call.items() if k != "function"}])
    content = message.get("content")
    for part in content if isinstance(content, list) else []:
        if isinstance(part, dict) and part.get("type") in _TEXT_PARTS:
            extra = {k: v for k, v in part.items() if k not in ("type", "text")}
            if extra:
                found.append(["part", extra])
    empty = sorted(k for k, v in message.items() if k not in _NO_VALUE_SKIPPED
                   and (v is None or v == [] or v == {}))
    if empty or (calls == [] and "tool_calls" in message):
        found.append(["empty", empty, calls == []])
    return found


def facets(message: dict[str, Any]) -> str:
    """The message's facets, ``""`` when no normalisation changed anything in it."""
    arguments = _arguments_facet(message)
    content = message.get("content")
    normal, text = content_of(content), _text(content)
    form = None if normal != "" else "absent" if "content" not in message else (
        None if content is None else type(content).__name__ + str(
            len(content) if isinstance(content, list) else content == ""))
    found = [("a", arguments), ("n", form),
             ("w", text if text is not None and text != text.strip() else None),
             ("p", [p.get("type") if isinstance(p, dict) else None for p in content]
              if isinstance(content, list) and content and normal != "" else None),
             ("r", reasoning_of(message) or None), ("m", _metadata(message) or None)]
    return ",".join(tag + _short(value) for tag, value in found if value is not None)


def entry(message: dict[str, Any]) -> str:
    """The message's key, with its facets when it has some."""
    key, found = message_key(message), facets(message)
    return f"{key}|{found}" if found else key


def entry_key(value: str) -> str:
    """The key part of an entry."""
    return value.partition("|")[0]


def _tags(value: str) -> dict[str, str]:
    return {f[0]: f[1:] for f in value.split(",") if f}


def differences(recorded: str, sent: str) -> MatchResult:
    """The matchers that map entry ``sent`` onto ``recorded`` (empty when equal); None
    when they are not the same message (another key, or reasoning sent back that is
    not the recorded reasoning)."""
    if recorded == sent:
        return frozenset()
    key, _, was = recorded.partition("|")
    sent_key, _, now = sent.partition("|")
    if key != sent_key:
        return None
    before, after = _tags(was), _tags(now)
    if "r" in after and after["r"] != before.get("r"):
        return None
    return frozenset(_TAGS[t] for t in set(before) | set(after)
                     if before.get(t) != after.get(t) and t in _TAGS)


def history_differences(recorded: Sequence[str], sent: Sequence[str],
                        allowed: Collection[str]) -> MatchResult:
    """``differences`` over two histories of one length, or None at the first message
    that is another, or that only a matcher not in ``allowed`` maps."""
    if len(recorded) != len(sent):
        return None
    if recorded == sent:  # byte-identical in the common case: one list comparison
        return frozenset()
    fired: set[str] = set()
    for was, now in zip(recorded, sent, strict=True):
        found = differences(was, now)
        if found is None or not found.issubset(allowed):
            return None
        fired |= found
    return frozenset(fired)
