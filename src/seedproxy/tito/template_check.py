"""The start-up check: does a chat template render incrementally, and by which rule.

``check`` proves, on probe conversations with and without tools and a system message,
that the template's full render of [user, assistant, user] (or tool) is the prompt +
the reply + ``Renderer.suffix_text``, up to one of these named rules:

- *reasoning*: a generation prompt that opens a think block (Qwen3-Thinking-2507,
  QwQ, DeepSeek-R1-Distill) may be missing from the full render, and an empty think
  block (GLM-4.5) may precede the reply there (later renders strip reasoning);
- *harmony* (gpt-oss): the full render writes the channel header the model samples
  itself, and a call as one assistant message ending with ``<|call|>``;
- *images* (a vision model): the same holds with image parts, and each image is exactly
  one placeholder id in every render;
- *latest user message* (Mistral Nemo, Small 3.1): the template writes the tools block
  (a run that opens and closes with special tokens) or the system message only at the
  latest user message, which each new user message's suffix writes again there.

Anything else is a ``ConfigError`` whose one line names where the renders differ.
"""

from __future__ import annotations

import re
from difflib import SequenceMatcher
from itertools import product
from typing import Any

from ..errors import BadRequest, ConfigError
from ..template_input import RenderOptions
from .harmony import CALL, END, FINAL_HEADER, START
from .renderer import PROBE_TOOLS, PROBE_USER, SENTINEL, THINK, THINK_END, Renderer

__all__ = ["check"]

_DEFAULT = RenderOptions()
_PROBE_SYSTEM = {"role": "system", "content": "Be brief."}
_PROBE_CALL_ID = "call00000"  # 9 alphanumerics: Mistral's templates take no other ids


def check(renderer: Renderer) -> None:
    """Prove ``renderer``'s template renders incrementally; ``ConfigError`` names what
    breaks (at start-up, so each render here runs once)."""
    follows = ({"role": "user", "content": "again"},
               {"role": "tool", "tool_call_id": _PROBE_CALL_ID, "content": "42"})
    for system, tools, follow in product((None, _PROBE_SYSTEM), (None, PROBE_TOOLS), follows):
        lead = [system] if system else []
        first = [*lead, PROBE_USER]
        reply = {"role": "assistant", "content": SENTINEL}
        try:
            prompt = renderer.full_text(first, tools)
            whole = renderer.full_text([*first, reply, follow], tools)
            after = renderer.text_after([follow], tools, _DEFAULT, lead=lead)
            if follow["role"] == "user" and not after.startswith(renderer.eot_text):
                raise BadRequest("the chat template does not end an assistant turn "
                                 f"with {renderer.eot_text!r}", param="messages")
        except BadRequest as exc:
            if follow["role"] == "tool":
                continue  # a template without tool messages: tools are refused later
            raise ConfigError(f"the chat template cannot render incrementally: "
                              f"{exc.message}") from None
        if follow["role"] == "tool" and renderer.turn_end(after) is None:
            continue  # no stop id opens a tool message: tool turns are refused later
        _compare(renderer, prompt, whole, after, follow["role"], system)
    if renderer.harmony is not None:
        _check_call(renderer)
    if renderer.vision is not None:
        _check_images(renderer)


def _check_images(renderer: Renderer) -> None:
    """The *images* rule (SGLang expands exactly one id per image, else re-tokenises)."""
    assert renderer.vision is not None
    image = {"type": "image"}
    first = [{"role": "user", "content": [image, {"type": "text", "text": "ping"}]}]
    follow = {"role": "user", "content": [{"type": "text", "text": "again"}, image, image]}
    reply = {"role": "assistant", "content": SENTINEL}
    try:
        prompt = renderer.full_text(first, None)
        whole = renderer.full_text([*first, reply, follow], None)
        after = renderer.text_after([follow], None, _DEFAULT)
    except BadRequest as exc:
        raise ConfigError(f"the chat template cannot render images: {exc.message}") from None
    counts = [len(renderer.vision.positions(renderer.encode(text)))
              for text in (prompt, whole, after)]
    if counts != [1, 3, 2]:
        raise ConfigError(
            f"the chat template does not write one {renderer.vision.image_token!r} per "
            f"image: {counts[0]} for one image, {counts[1]} for three")
    _compare(renderer, prompt, whole, after, "user", None)


def _check_call(renderer: Renderer) -> None:
    """The *harmony* rule for a call: [user, assistant call, tool] renders as the prompt +
    one assistant message ending with ``<|call|>`` + the suffix after a call."""
    call = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_0", "type": "function",
         "function": {"name": "probe", "arguments": {"x": "y"}}}]}
    follow = {"role": "tool", "tool_call_id": "call_0", "content": "42"}
    try:
        prompt = renderer.full_text([PROBE_USER], PROBE_TOOLS)
        whole = renderer.full_text([PROBE_USER, call, follow], PROBE_TOOLS)
        suffix = renderer.suffix_text([follow], PROBE_TOOLS, end=renderer.eot_id, reply=call)
    except BadRequest as exc:
        raise ConfigError(f"the chat template cannot render incrementally: "
                          f"{exc.message}") from None
    middle = whole[len(prompt):len(whole) - len(suffix)]
    if (whole.startswith(prompt) and whole.endswith(suffix)
            and len(prompt) + len(suffix) <= len(whole) and middle.endswith(CALL)
            and START not in middle and END not in middle):
        return
    raise ConfigError(
        "the chat template cannot render incrementally: in the full render of [user, "
        "assistant tool call, tool] the call is not one assistant message between the "
        f"prompt and the tool message (it writes {middle[:48]!r})")


def _compare(renderer: Renderer, prompt: str, whole: str, after: str, role: str,
             system: dict[str, Any] | None) -> None:
    """``whole`` must be ``prompt`` + reply + ``after`` (the end of the turn and what
    follows), up to one of the module's rules."""
    tail = SENTINEL + after
    if whole == prompt + tail:
        return
    bare = prompt.rstrip()  # a generation prompt's think opening, missing from ``whole``
    if bare.endswith(THINK) and whole == bare[:-len(THINK)] + tail:
        return
    if renderer.harmony is not None and whole == prompt + FINAL_HEADER + tail:
        return  # the model samples the channel header itself
    middle = whole[len(prompt):len(whole) - len(tail)] if len(whole) > len(
        prompt) + len(tail) else ""
    if (whole.startswith(prompt) and whole.endswith(tail)
            and middle.strip() == THINK + THINK_END):
        return
    if whole.endswith(tail) and _only_latest(renderer, prompt, whole[:len(whole) - len(tail)],
                                             after, system):
        return
    built = prompt + tail
    where = next((i for i, (a, b) in enumerate(zip(built, whole, strict=False))
                  if a != b), min(len(built), len(whole)))
    raise ConfigError(
        "the chat template cannot render incrementally: in the full render of [user, "
        f"assistant, {role}] the assistant turn is not the prompt + the reply "
        f"({whole[where:where + 24]!r} at character {where}, where the prompt + reply "
        f"has {built[where:where + 24]!r})")


def _only_latest(renderer: Renderer, prompt: str, history: str, after: str,
                 system: dict[str, Any] | None) -> bool:
    """Whether ``prompt`` (the latest user message rendered) is ``history`` (the same
    message rendered as history) plus only what the template writes at the latest user
    message, which ``after`` writes again: runs that open and close with a special
    token (the tools block), or the system message's text at the start of a text run
    (Nemo's template writes it nowhere when the last message is a tool result; the
    recorded prompt keeps it where it was written)."""
    ours, theirs = _pieces(renderer, prompt), _pieces(renderer, history)
    specials = set(renderer.special_texts)
    text = system.get("content") if system else None
    moved = False
    for tag, i1, i2, j1, j2 in SequenceMatcher(None, ours, theirs, autojunk=False
                                               ).get_opcodes():
        run = ours[i1:i2]
        if tag == "equal":
            continue
        moved = True
        if tag == "delete" and run[0] in specials and run[-1] in specials and (
                "".join(run) in after):
            continue
        if not (tag == "replace" and i2 - i1 == 1 and j2 - j1 == 1 and isinstance(text, str)
                and text and run[0].startswith(text)
                and (text in after or text not in history)
                and run[0][len(text):].lstrip() == theirs[j1]):
            return False
    return moved


def _pieces(renderer: Renderer, text: str) -> list[str]:
    """``text`` split into special tokens' texts and the text runs between them."""
    pattern = "(" + "|".join(re.escape(t) for t in renderer.special_texts) + ")"
    return [piece for piece in re.split(pattern, text) if piece]
