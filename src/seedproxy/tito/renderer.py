"""Chat-template rendering for token-in-token-out mode.

Invariants:
- A full prompt is the template's render of the whole history with the generation
  prompt, tokenised once (no special tokens added beyond what the template writes).
- An incremental suffix never re-renders history: it is the text the template writes
  after an assistant turn (a probe whose content is a sentinel) for the new messages,
  up to and including the next generation prompt. The completion that was sampled
  ends with a stop id (the end-of-turn token; one of the model's own end ids, such as
  Llama 3.1's ``<|eom_id|>``, standing for it; or, for a template with no end-of-turn
  such as GLM-4.5's, the next message's opener), so the suffix starts after it; a
  completion cut short (no stop id) gets the template's text from its end-of-turn on,
  and ``</think>`` before it when it stopped inside a reasoning block
  (``think_closing``).
- The probe carries the conversation's system message, so a template that writes it
  (or the tools) at the latest user message only writes it again in each new user
  message's suffix: the model sees it before every user message it answers.
- Harmony: after a sampled tool call the suffix is what the template writes after a
  call to the same function (its tool message names it).
- A request's ``RenderOptions`` (template kwargs, generation prompt, continuing the
  final message) apply to the full render and to the suffix alike.
- With ``today`` set, a template's ``strftime_now`` formats that date (at midnight)
  whatever day it renders on (``dated``), so a template that writes the date renders
  the same prompt on every day.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import BadRequest, ConfigError
from ..template_input import RenderOptions, content_format, rendered, reserved_names
from .harmony import CALL, harmony_of
from .vision import Vision

__all__ = ["PROBE_TOOLS", "PROBE_USER", "SENTINEL", "THINK", "THINK_END", "Renderer",
           "dated", "encoder_of"]

SENTINEL = "\u2063SEEDPROXY-ASSISTANT-TURN\u2063"
THINK = "<think>"
THINK_END = "</think>"
PROBE_USER = {"role": "user", "content": "ping"}
PROBE_TOOLS = [{"type": "function", "function": {
    "name": "probe", "description": "a probe",
    "parameters": {"type": "object", "properties": {"x": {"type": "string"}}}}}]
_DEFAULT = RenderOptions()
_CODES = "aAbBcdHIjmMpSUwWyYZz"


def dated(today: datetime.date) -> str:
    """A Jinja prelude defining ``strftime_now(fmt)`` for ``today`` at midnight: a macro
    the template's own calls resolve to before transformers' global (which reads the
    clock). Each ``%`` code is Python's ``strftime`` of that moment; ``%%`` is ``%``."""
    moment = datetime.datetime.combine(today, datetime.time())
    codes = {code: moment.strftime(f"%{code}") for code in _CODES}
    codes["%"] = "%"
    table = ", ".join(f'"{k}": "{v}"' for k, v in codes.items())
    return (
        "{%- macro strftime_now(fmt) -%}"
        "{%- set codes = {" + table + "} -%}"
        "{%- set ns = namespace(out='', code=false) -%}"
        "{%- for ch in fmt -%}"
        "{%- if ns.code -%}{%- set ns.out = ns.out ~ codes.get(ch, '%' ~ ch) -%}"
        "{%- set ns.code = false -%}"
        "{%- elif ch == '%' -%}{%- set ns.code = true -%}"
        "{%- else -%}{%- set ns.out = ns.out ~ ch -%}{%- endif -%}"
        "{%- endfor -%}"
        "{{- ns.out -}}"
        "{%- endmacro -%}"
    )


def encoder_of(tokenizer: Any) -> Callable[[str], list[int]]:
    """``tokenizer.encode(text, add_special_tokens=False)`` as a function. A fast (Rust)
    tokenizer is called through its backend directly when the two agree on a probe
    text holding every special token (the wrapper costs about as much as the encode)."""
    def wrapped(text: str) -> list[int]:
        return list(tokenizer.encode(text, add_special_tokens=False))

    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or not callable(getattr(backend, "encode", None)):
        return wrapped

    def direct(text: str) -> list[int]:
        ids: list[int] = backend.encode(text, add_special_tokens=False).ids
        return ids

    special = "".join(str(t) for t in getattr(tokenizer, "all_special_tokens", []))
    probe = f" Hello  world,\n\tcafé 日本 🙂{special} x{special[:1]}y "
    return direct if direct(probe) == wrapped(probe) else wrapped


class Renderer:
    """Renders messages with one chat template and one tokenizer (thread-safe reads)."""

    def __init__(self, tokenizer: Any, template: str | None = None, *,
                 today: datetime.date | None = None, eos_ids: Sequence[int] = (),
                 vision: Vision | None = None) -> None:
        """``eos_ids``: the model's own end ids (its ``generation_config``: Llama 3.1's
        ``<|eom_id|>``), stop ids as SGLang makes them, next to the template's end-of-turn
        and the tokenizer's eos: a turn ending in any of them is closed. ``vision``: the
        model takes images, one placeholder per image part."""
        self.tokenizer = tokenizer
        self.vision = vision
        self.template = template if template is not None else tokenizer.chat_template
        if not isinstance(self.template, str) or not self.template:
            raise ConfigError("the tokenizer has no chat template: pass --chat-template FILE")
        if today is not None and "strftime_now" in self.template:
            self.template = dated(today) + self.template
        self.special_texts: tuple[str, ...] = tuple(sorted(
            ({str(t) for t in tokenizer.all_special_tokens}
             | {str(t) for t in getattr(tokenizer, "added_tokens_encoder", {})}) - {""},
            key=len, reverse=True))
        """The special and added tokens' texts, longest first."""
        self.encode = encoder_of(tokenizer)
        """``tokenizer.encode(text, add_special_tokens=False)``."""
        self.content_format = content_format(self.template)
        self.reserved = reserved_names(tokenizer)
        self.eot_text, self.eot_id = self._find_end_of_turn()
        self.harmony = harmony_of(tokenizer, self.eot_text)
        turn_ends = list(self.harmony) if self.harmony else [self.eot_id]
        eos = tokenizer.eos_token_id
        if isinstance(eos, int) and not (self.harmony and eos == self.eot_id):
            turn_ends.append(eos)
        turn_ends += eos_ids
        self.stop_token_ids: tuple[int, ...] = tuple(dict.fromkeys(turn_ends))
        self.end_ids = frozenset([self.eot_id, *turn_ends])
        """Ids that close a sampled turn (or, in harmony, its last message): a
        completion ending in one needs no end-of-turn before the next messages."""
        self._stop_texts = {i: str(tokenizer.decode([i], skip_special_tokens=False))
                            for i in sorted(self.end_ids)}

    def full_text(self, messages: list[dict[str, Any]], tools: list[Any] | None,
                  options: RenderOptions = _DEFAULT) -> str:
        """The template's text; ``BadRequest`` when it cannot render these messages."""
        return rendered(self.tokenizer, messages, tools, options, self.template)

    def suffix_text(self, new: list[dict[str, Any]], tools: list[Any] | None,
                    *, end: int | None, options: RenderOptions = _DEFAULT,
                    reply: dict[str, Any] | None = None,
                    system: dict[str, Any] | None = None) -> str:
        """What follows a sampled assistant turn for the ``new`` messages (see above);
        ``end``: the stop id the turn ended with (its text, or the template's
        end-of-turn that it stands for, is not repeated), None for a turn cut short;
        ``reply``: that turn as the client sent it back; ``system``: the conversation's
        first message when it is a system message."""
        lead = [system] if system is not None else []
        if self.harmony is not None and reply is not None and reply.get("tool_calls"):
            return self._after_call(reply, new, tools, closed=end is not None,
                                    options=options, lead=lead)
        after = self.text_after(new, tools, options, lead=lead)
        opener = self.turn_end(after)
        if opener is None:
            raise BadRequest("the chat template does not end an assistant turn with a stop "
                             f"token before these messages (it writes {after[:20]!r})",
                             param="messages")
        if end is None:
            return after
        ended = self._stop_texts.get(end, "")
        if ended and after.startswith(ended):
            return after[len(ended):]
        if opener == self.eot_text:  # the model's own end stands for the template's
            return after[len(opener):]
        raise BadRequest(f"the turn ended with {ended!r}, where the chat template writes "
                         f"{opener!r} before these messages", param="messages")

    def text_after(self, new: list[dict[str, Any]], tools: list[Any] | None,
                   options: RenderOptions, *, lead: Sequence[dict[str, Any]] = ()) -> str:
        """The template's text after a probe assistant turn's content, for ``new``;
        ``lead``: the messages before the probe's user message (a system message)."""
        probe = [*lead, PROBE_USER, {"role": "assistant", "content": SENTINEL}]
        text = self.full_text(probe + new, tools, options)
        if text.count(SENTINEL) != 1:
            raise BadRequest("the chat template does not render an assistant turn verbatim",
                             param="messages")
        return text[text.index(SENTINEL) + len(SENTINEL):]

    def turn_end(self, after: str) -> str | None:
        """The stop token's text that ``after`` opens with (the longest), or None."""
        found = [t for t in self._stop_texts.values() if t and after.startswith(t)]
        return max(found, key=len) if found else None

    def _after_call(self, reply: dict[str, Any], new: list[dict[str, Any]],
                    tools: list[Any] | None, *, closed: bool, options: RenderOptions,
                    lead: Sequence[dict[str, Any]]) -> str:
        """Harmony: what the template writes after an assistant call to the function
        ``reply`` called first (the tool message names it), ``<|call|>`` first when the
        sampled call did not end with it."""
        first = reply["tool_calls"][0]
        function = first.get("function") if isinstance(first, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        probe: list[dict[str, Any]] = [*lead, PROBE_USER, {
            "role": "assistant", "content": "", "tool_calls": [
                {"id": "call_0", "type": "function",
                 "function": {"name": name, "arguments": {}}}]}]
        head = self.full_text(probe, tools, RenderOptions(options.kwargs, generation_prompt=False))
        text = self.full_text(probe + new, tools, options)
        if not head.endswith(CALL) or not text.startswith(head):
            raise BadRequest("the chat template does not end a tool call turn with "
                             f"{CALL!r} before these messages", param="messages")
        after = text[len(head):]
        return after if closed else CALL + after

    def think_closing(self, prompt_tail: Sequence[int], completion: Sequence[int]) -> str:
        """The text that closes a reasoning block a turn cut short left open ("" if it
        left none): ``</think>\n\n`` after a newline, as Qwen3's and DeepSeek-R1's
        templates close one. ``prompt_tail``: the prompt's last ids (its generation
        prompt may have opened the block)."""
        text = str(self.tokenizer.decode([*prompt_tail, *completion],
                                         skip_special_tokens=False))
        if text.rfind(THINK) <= text.rfind(THINK_END):
            return ""
        return ("" if text.endswith("\n") else "\n") + THINK_END + "\n\n"

    def _find_end_of_turn(self) -> tuple[str, int]:
        """The special token that closes an assistant turn in this template."""
        probe = [PROBE_USER, {"role": "assistant", "content": SENTINEL}, PROBE_USER]
        try:
            text = self.full_text(probe, None)
        except BadRequest as exc:
            raise ConfigError(f"the chat template cannot render a conversation: {exc.message}"
                              ) from None
        if text.count(SENTINEL) != 1:
            raise ConfigError("the chat template does not render assistant content verbatim, "
                              "so it cannot render incrementally")
        after = text[text.index(SENTINEL) + len(SENTINEL):]
        eot = next((t for t in self.special_texts if after.startswith(t)), None)
        if eot is None:
            raise ConfigError("the chat template does not close an assistant turn with a "
                              f"special token (it writes {after[:20]!r})")
        ids = self.encode(eot)
        if len(ids) != 1:
            raise ConfigError(f"the end-of-turn token {eot!r} is not a single token")
        return eot, ids[0]
