"""What a chat request hands the chat template, prepared as SGLang's chat route does
(SGLang 0.5.23 ``serving_chat.py`` / ``jinja_template_utils.py``). A bad field is a 400
naming it, raised before the slot.

- ``chat_template_kwargs`` reach the template as extra variables: a JSON object of at
  most ``_MAX_KWARGS_BYTES`` that sets none of ``apply_chat_template``'s own parameters.
- A top-level ``reasoning_effort`` (SGLang's levels, or a number from 0 to 0.99) is the
  template's ``reasoning_effort`` and sets ``thinking`` and ``enable_thinking`` to
  whether it is not ``"none"``, each where the kwargs leave it unset (SGLang's request
  model).
- Continuing (``continue_final_message``) needs a final assistant message and an
  ``add_generation_prompt`` not set true (transformers refuses both at once).
- A "string" template (no loop over ``message.content``) gets text parts joined with a
  space, an "openai" one the list; a media part is a 400, except an image of a vision
  model (``vision.py``) under an "openai" template, kept as ``{"type": "image"}``.
- ``content: null`` is "", keys whose value is null are dropped, and a tool call's
  ``arguments`` string that holds a JSON object is parsed into it.
"""

from __future__ import annotations

import inspect
import json
from dataclasses import dataclass, field
from typing import Any

import orjson

from .errors import BadRequest
from .nesting import MAX_DEPTH, too_deep

__all__ = ["RenderOptions", "content_format", "render_options", "rendered", "reserved_names",
           "template_messages", "unreadable_arguments"]

_MAX_KWARGS_BYTES = 4096
_TEXT_PARTS = frozenset({"text", "input_text"})
_MEDIA_WORDS = ("image", "audio", "video", "vision")
_CONTENT_NAMES = ("message", "msg", "m")
_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "ultra", "max")


@dataclass(frozen=True, slots=True)
class RenderOptions:
    """How one request's messages are rendered, besides the messages and tools."""

    kwargs: dict[str, Any] = field(default_factory=dict)
    generation_prompt: bool = True
    continue_final: bool = False


def _flag(body: dict[str, Any], key: str) -> bool | None:
    value = body.get(key)
    if value is not None and not isinstance(value, bool):
        raise BadRequest(f"{key} must be a boolean", param=key)
    return value


def reserved_names(tokenizer: Any) -> frozenset[str]:
    """Names a template kwarg may not take: ``apply_chat_template``'s own parameters."""
    try:
        params = inspect.signature(tokenizer.apply_chat_template).parameters.values()
        names = {p.name for p in params if p.kind is not inspect.Parameter.VAR_KEYWORD}
    except (TypeError, ValueError):
        names = set()
    return frozenset(names | {"messages", "conversation", "tools", "documents",
                              "chat_template", "add_generation_prompt",
                              "continue_final_message", "tokenize", "return_dict"})


def render_options(body: dict[str, Any], reserved: frozenset[str]) -> RenderOptions:
    """The request's template options; ``BadRequest`` names the first bad field."""
    raw = body.get("chat_template_kwargs")
    kwargs: dict[str, Any] = {}
    if raw is not None:
        if not isinstance(raw, dict) or not all(isinstance(k, str) for k in raw):
            raise BadRequest("chat_template_kwargs must be an object with string keys",
                             param="chat_template_kwargs")
        clash = sorted(set(raw) & reserved)
        if clash:
            raise BadRequest(f"chat_template_kwargs cannot set {clash[0]!r}: it is a field "
                             "of the request, not a template variable",
                             param="chat_template_kwargs")
        try:
            size = len(orjson.dumps(raw))
        except (TypeError, orjson.JSONEncodeError):
            raise BadRequest("chat_template_kwargs must be JSON",
                             param="chat_template_kwargs") from None
        if size > _MAX_KWARGS_BYTES:
            raise BadRequest(f"chat_template_kwargs must be at most {_MAX_KWARGS_BYTES} "
                             "bytes of JSON", param="chat_template_kwargs")
        kwargs = dict(raw)
    _add_effort(body.get("reasoning_effort"), kwargs)
    generation = _flag(body, "add_generation_prompt")
    continued = bool(_flag(body, "continue_final_message"))
    if continued:
        if generation:
            raise BadRequest("continue_final_message and add_generation_prompt cannot both "
                             "be true", param="continue_final_message")
        messages = body.get("messages") or []
        if not messages or not isinstance(messages[-1], dict) or (
                messages[-1].get("role") != "assistant"):
            raise BadRequest("continue_final_message needs the last message to be the "
                             "assistant's", param="continue_final_message")
        return RenderOptions(kwargs, generation_prompt=False, continue_final=True)
    return RenderOptions(kwargs, generation_prompt=generation is not False)


def _add_effort(effort: Any, kwargs: dict[str, Any]) -> None:
    if effort is None:
        return
    level = isinstance(effort, str) and effort in _EFFORTS
    number = (isinstance(effort, int | float) and not isinstance(effort, bool)
              and 0 <= effort <= 0.99)
    if not (level or number):
        raise BadRequest("reasoning_effort must be one of " + ", ".join(_EFFORTS)
                         + " or a number from 0 to 0.99", param="reasoning_effort")
    thinking = effort != "none"
    kwargs.setdefault("thinking", thinking)
    kwargs.setdefault("enable_thinking", thinking)
    kwargs.setdefault("reasoning_effort", effort)


def content_format(template: str) -> str:
    """``openai`` when the template loops over a message's content, else ``string``
    (SGLang's detection: a template naming media is taken as ``openai``)."""
    if any(word in template for word in _MEDIA_WORDS):
        return "openai"
    from jinja2 import Environment, nodes
    from jinja2.exceptions import TemplateError

    try:
        tree = Environment(extensions=["jinja2.ext.loopcontrols", "jinja2.ext.do"]
                           ).parse(template)
    except TemplateError:
        return "string"

    def reads_content(node: nodes.Node) -> bool:
        while isinstance(node, nodes.Filter | nodes.Test) or (
                isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Slice)):
            inner: nodes.Node | None = node.node
            if inner is None:
                return False
            node = inner
        if isinstance(node, nodes.Getattr):
            key: Any = node.attr
        elif isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Const):
            key = node.arg.value
        else:
            return False
        base = node.node
        return key == "content" and isinstance(base, nodes.Name) and (
            base.name in _CONTENT_NAMES)

    loops = tree.find_all(nodes.For)
    return "openai" if any(reads_content(loop.iter) for loop in loops) else "string"


def _content(content: Any, fmt: str, images: bool) -> Any:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise BadRequest("message content must be a string or a list of content parts",
                         param="messages")
    parts: list[dict[str, Any]] = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in _TEXT_PARTS and isinstance(part.get("text"), str):
            parts.append({"type": "text", "text": part["text"]})
        elif kind == "image_url" and images and fmt == "openai":
            parts.append({"type": "image"})  # the template writes its placeholder
        else:
            name = kind if isinstance(kind, str) else type(part).__name__
            raise BadRequest(f"content parts of type {name!r} are not supported: in "
                             "token-in-token-out mode the model takes text only (send text "
                             "parts)", param="messages")
    if fmt == "openai":
        return parts
    return " ".join(part["text"] for part in parts)


def _arguments(raw: Any) -> Any:
    if not isinstance(raw, str):
        return raw
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError:
        return raw
    except (RecursionError, ValueError):  # too deep for json; an int over 4,300 digits
        raise unreadable_arguments() from None
    if too_deep(parsed):
        raise unreadable_arguments()
    return parsed if isinstance(parsed, dict) else raw


def _call(call: Any) -> Any:
    fn = call.get("function") if isinstance(call, dict) else None
    if isinstance(fn, dict) and "arguments" in fn:
        return {**call, "function": {**fn, "arguments": _arguments(fn["arguments"])}}
    return call


def template_messages(messages: list[dict[str, Any]], fmt: str, *,
                      images: bool = False) -> list[dict[str, Any]]:
    """Copies of ``messages`` as the template gets them; ``images``: the model takes
    images (an ``image_url`` part becomes ``{"type": "image"}``)."""
    out = []
    for message in messages:
        copy = {k: v for k, v in message.items() if v is not None}
        copy["content"] = _content(message.get("content"), fmt, images)
        calls = copy.get("tool_calls")
        if isinstance(calls, list):
            copy["tool_calls"] = [_call(call) for call in calls]
        out.append(copy)
    return out


def unreadable_arguments() -> BadRequest:
    """The 400 for a client's tool-call arguments no JSON reader can take."""
    return BadRequest(f"a tool call's arguments nest more than {MAX_DEPTH} levels deep or "
                      "hold an integer too long to read", param="messages")


def rendered(tokenizer: Any, messages: list[Any], tools: list[Any] | None,
             options: RenderOptions, template: str | None = None) -> str:
    """``template`` (the tokenizer's own when None) applied to ``messages``."""
    from jinja2 import TemplateError

    extra = dict(options.kwargs)
    if options.continue_final:
        extra["continue_final_message"] = True
    try:
        text = tokenizer.apply_chat_template(
            messages, tools=tools or None, chat_template=template, tokenize=False,
            add_generation_prompt=options.generation_prompt, **extra)
    except (TemplateError, TypeError, KeyError, ValueError, AttributeError, IndexError) as exc:
        raise BadRequest(f"the chat template cannot render these messages: {exc}",
                         param="messages") from None
    if not isinstance(text, str):
        raise BadRequest("the chat template did not render text", param="messages")
    return text
