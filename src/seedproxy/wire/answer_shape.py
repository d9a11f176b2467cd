"""The shape of an upstream's successful answer, checked before anything reads it.

Exactly what seedproxy (its capture walks, the fan-out merge, the Responses bridge) and
an OpenAI SDK rely on, per dialect: OpenAI's chat and completion objects and their
stream chunks, and SGLang's ``/generate`` items. An answer outside it raises
``MalformedAnswer`` (a 502 naming the field); one inside it must never make the
readers fail, so an exception there is seedproxy's own bug and surfaces as a 500.
Values the readers take leniently (token ids, logprobs) are not checked here: a bad
list is recorded as absent, never shortened.
"""

from __future__ import annotations

from typing import Any

from ..errors import UpstreamError
from .types import Endpoint

__all__ = ["MalformedAnswer", "UpstreamFailed", "check_answer", "check_chunk", "check_error"]


class MalformedAnswer(UpstreamError):
    """502: an upstream's 200 answer that is not shaped as its protocol promises."""


class UpstreamFailed(UpstreamError):
    """An upstream ended its stream with an error event (status: the error's code, which
    the client's error event carries as SGLang's does: its ``code``)."""


def check_answer(endpoint: Endpoint, answer: Any) -> None:
    """Raise ``MalformedAnswer`` unless ``answer`` is a whole answer for ``endpoint``."""
    if endpoint is Endpoint.GENERATE:
        items = answer if isinstance(answer, list) else [answer]
        for i, item in enumerate(items):
            _generate_item(item, f"[{i}]" if isinstance(answer, list) else "answer")
    elif endpoint in (Endpoint.CHAT, Endpoint.COMPLETIONS):
        _openai(answer, chat=endpoint is Endpoint.CHAT, chunk=False)
    else:
        _object(answer, "the answer")


def check_chunk(endpoint: Endpoint, event: Any) -> None:
    """Raise ``UpstreamFailed`` for an error event, ``MalformedAnswer`` unless ``event``
    is one stream chunk for ``endpoint``."""
    check_error(event)
    if endpoint is Endpoint.GENERATE:
        _generate_item(event, "chunk")
    elif endpoint in (Endpoint.CHAT, Endpoint.COMPLETIONS):
        _openai(event, chat=endpoint is Endpoint.CHAT, chunk=True)
    else:
        _object(event, "the chunk")


def check_error(event: Any) -> None:
    """Raise ``UpstreamFailed`` when a stream event is an error event."""
    if not isinstance(event, dict) or event.get("error") is None:
        return
    error = event["error"]
    inner = error if isinstance(error, dict) else {"message": error}
    message = inner.get("message")
    code = inner.get("code")
    status = code if type(code) is int and 400 <= code <= 599 else 502
    text = message if isinstance(message, str) else "the upstream ended the stream with an error"
    raise UpstreamFailed(f"upstream error mid-stream: {text[:2000]}", status_code=status,
                         code=status)


def _bad(where: str, what: str) -> MalformedAnswer:
    return MalformedAnswer(f"upstream answer: {where} is not {what}")


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _bad(where, "an object")
    return value


def _optional(holder: dict[str, Any], key: str, kinds: tuple[type, ...], where: str) -> None:
    value = holder.get(key)
    if value is not None and (not isinstance(value, kinds) or isinstance(value, bool)):
        names = " or ".join(k.__name__ for k in kinds)
        raise _bad(f"{where}.{key}", f"{names} or null")


def _openai(answer: Any, *, chat: bool, chunk: bool) -> None:
    top = _object(answer, "the chunk" if chunk else "the answer")
    choices = top.get("choices")
    if not isinstance(choices, list) and (choices is not None or not chunk):
        raise _bad("choices", "a list")
    _optional(top, "usage", (dict,), "answer")
    _usage(top.get("usage"))
    _optional(top, "sglext", (dict,), "answer")
    for i, raw in enumerate(choices or []):
        where = f"choices[{i}]"
        choice = _object(raw, where)
        _optional(choice, "index", (int,), where)
        _optional(choice, "finish_reason", (str,), where)
        _optional(choice, "logprobs", (dict,), where)
        if not chat:
            _optional(choice, "text", (str,), where)
            continue
        key = "delta" if chunk else "message"
        if key not in choice and chunk:
            continue
        message = _object(choice.get(key), f"{where}.{key}")
        _optional(message, "content", (str,), f"{where}.{key}")
        _optional(message, "tool_calls", (list,), f"{where}.{key}")
        for j, call in enumerate(message.get("tool_calls") or []):
            call_where = f"{where}.{key}.tool_calls[{j}]"
            _optional(_object(call, call_where), "function", (dict,), call_where)


def _usage(usage: Any) -> None:
    """The counts the bridges and the fan-out merge read (ints or null)."""
    if not isinstance(usage, dict):
        return
    for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
        _optional(usage, key, (int,), "usage")
    _optional(usage, "prompt_tokens_details", (dict,), "usage")
    details = usage.get("prompt_tokens_details")
    if isinstance(details, dict):
        _optional(details, "cached_tokens", (int,), "usage.prompt_tokens_details")


def _generate_item(item: Any, where: str) -> None:
    holder = _object(item, where)
    _optional(holder, "text", (str,), where)
    _optional(holder, "meta_info", (dict,), where)
    _optional(holder, "index", (int,), where)
