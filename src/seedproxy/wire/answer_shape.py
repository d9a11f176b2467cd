"""The shape of an upstream's successful answer, checked before anything reads it:
exactly what seedproxy's readers and an OpenAI SDK rely on (OpenAI's chat and completion
objects and chunks, SGLang's ``/generate`` items). An answer outside it is a
``MalformedAnswer`` (a 502 naming the field); one inside it must never make the readers
fail (an exception there is seedproxy's own bug, a 500). Values read leniently (token
ids, logprobs) are not checked here: a bad list is recorded as absent.
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


def _optional(holder: dict[str, Any], where: str, **kinds: type) -> None:
    """Each ``key=kind``: the value is a ``kind`` (not a bool) or null."""
    for key, kind in kinds.items():
        value = holder.get(key)
        if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
            raise _bad(f"{where}.{key}", f"{kind.__name__} or null")


def _openai(answer: Any, *, chat: bool, chunk: bool) -> None:
    top = _object(answer, "the chunk" if chunk else "the answer")
    choices = top.get("choices")
    if not isinstance(choices, list) and (choices is not None or not chunk):
        raise _bad("choices", "a list")
    _optional(top, "answer", usage=dict)
    _usage(top.get("usage"))
    _optional(top, "answer", sglext=dict)
    for i, raw in enumerate(choices or []):
        where = f"choices[{i}]"
        choice = _object(raw, where)
        _optional(choice, where, index=int, finish_reason=str, logprobs=dict)
        if not chat:
            _optional(choice, where, text=str)
            continue
        key = "delta" if chunk else "message"
        if key not in choice and chunk:
            continue
        message = _object(choice.get(key), f"{where}.{key}")
        _optional(message, f"{where}.{key}", content=str, tool_calls=list)
        for j, call in enumerate(message.get("tool_calls") or []):
            call_where = f"{where}.{key}.tool_calls[{j}]"
            _optional(_object(call, call_where), call_where, function=dict)


def _usage(usage: Any) -> None:
    """The counts the bridges and the fan-out merge read (ints or null)."""
    if not isinstance(usage, dict):
        return
    _optional(usage, "usage", prompt_tokens=int, completion_tokens=int, total_tokens=int,
              prompt_tokens_details=dict)
    details = usage.get("prompt_tokens_details")
    if isinstance(details, dict):
        _optional(details, "usage.prompt_tokens_details", cached_tokens=int)


def _generate_item(item: Any, where: str) -> None:
    holder = _object(item, where)
    _optional(holder, where, text=str, meta_info=dict, index=int)
