"""Which earlier turn a chat request continues, and the prompt it gets.

A request *extends* turn t when its messages are t's messages, then an assistant
message matching one of t's recorded replies, then at least one new message, with
the same context (tools, template kwargs). Its prompt is then t's prompt ids + that
choice's completion ids exactly as sampled (its end included) + the ids of the new
messages only. Otherwise it is a full render (a new branch), and ``forked_from``
names the earlier turn sharing the longest message prefix, against which
``rendered_reason`` says why. A request continuing its final assistant message
(``continue_final_message``) records the messages before it; its reply is matched
later as that message's content + the sampled content. Only the session's recorded
turns are read, so this is the same in every store.
"""

from __future__ import annotations

from array import array
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..sessions import ChoiceRecord
from ..sessions.token_ids import TokenIds
from ..template_input import RenderOptions, render_options, template_messages
from .facets import (
    MATCHERS,
    context_key,
    differences,
    entry,
    entry_key,
    history_differences,
    message_key,
    reasoning_key,
    reasoning_of,
)
from .renderer import Renderer

_TAIL = 8  # prompt ids enough to hold a generation prompt's ``<think>\n``

__all__ = ["FullRender", "Prompt", "RecordedTurn", "plan_prompt", "reply_key",
           "tito_record"]


class RecordedTurn(Protocol):
    """What matching reads of an earlier turn (an ``Interaction`` or a view's ``Turn``)."""

    @property
    def interaction_id(self) -> str: ...
    @property
    def request_index(self) -> int: ...
    @property
    def status(self) -> int: ...
    @property
    def tito(self) -> dict[str, Any] | None: ...
    @property
    def choices(self) -> list[ChoiceRecord]: ...
    def prompt_ids(self) -> TokenIds: ...


@dataclass(slots=True)
class Prompt:
    """The token prompt for one request, and where it came from."""

    ids: TokenIds
    opens_reasoning: bool
    context: str
    message_keys: list[str]
    extends: dict[str, Any] | None = None
    forked_from: dict[str, Any] | None = None
    prefix: str | None = None  # the continued final assistant message's text
    how: dict[str, Any] | None = None
    """The record's ``tito["prompt"]``: ``extended``, ``matched`` (with the matchers that
    mapped the resent history), or ``rendered`` (with the reason)."""
    image_positions: list[int] = field(default_factory=list)  # placeholders in ``ids``


def _reply_entry(reply: dict[str, Any]) -> str | None:
    facets = reply.get("facets")
    key = reply.get("key")
    if not isinstance(key, str):
        return None
    return f"{key}|{facets}" if isinstance(facets, str) and facets else key


def _matches(reply: dict[str, Any], message: dict[str, Any], sent: str) -> frozenset[str] | None:
    """The matchers that map the resent ``message`` (entry ``sent``) onto ``reply``."""
    if message.get("role") != "assistant":
        return None
    if "facets" not in reply:  # recorded before facets: its key and reasoning only
        if message_key(message) != reply.get("key"):
            return None
        said = reasoning_of(message)
        return frozenset() if not said or reasoning_key(said) == reply.get(
            "reasoning") else None
    recorded = _reply_entry(reply)
    return None if recorded is None else differences(recorded, sent)


def _extends(turn: RecordedTurn, messages: list[dict[str, Any]], keys: list[str],
             context: str, allowed: Collection[str]) -> tuple[int, frozenset[str]] | None:
    """The choice of ``turn`` that ``messages`` continue, with the matchers that mapped
    them, or None."""
    tito = turn.tito
    if turn.status >= 400 or not tito or tito.get("context") != context:
        return None
    earlier = tito.get("messages") or []
    size = len(earlier)
    if len(keys) < size + 2:
        return None
    fired = history_differences(earlier, keys[:size], allowed)
    if fired is None:
        return None
    replies = tito.get("replies")
    for choice, reply in enumerate(replies if isinstance(replies, list) else []):
        if choice < len(turn.choices) and turn.choices[choice].token_ids:
            found = _matches(reply, messages[size], keys[size])
            if found is not None and found.issubset(allowed):
                return choice, fired | found
    return None


def _common(a: list[str], b: list[str]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False))
                 if x != y and entry_key(x) != entry_key(y)), min(len(a), len(b)))


@dataclass(slots=True)
class FullRender:
    """A full render still to run (the template over every message, then tokenising),
    with everything else about the prompt decided. It reads no session state, so it
    may run on a worker thread."""

    renderer: Renderer
    messages: list[dict[str, Any]]
    tools: list[Any] | None
    options: RenderOptions
    context: str
    recorded: list[str]
    prefix: str | None
    forked_from: dict[str, Any] | None
    how: dict[str, Any] | None = None

    @property
    def size(self) -> int:
        """The characters of message text it renders (what its cost grows with)."""
        return sum(len(_text(m.get("content"))) for m in self.messages)

    def run(self) -> Prompt:
        text = self.renderer.full_text(self.messages, self.tools, self.options)
        ids = array("i", self.renderer.encode(text))
        vision = self.renderer.vision
        return Prompt(TokenIds(ids), _opens(text, self.options), self.context, self.recorded,
                      prefix=self.prefix, forked_from=self.forked_from, how=self.how,
                      image_positions=vision.positions(ids) if vision is not None else [])


def plan_prompt(renderer: Renderer, body: dict[str, Any], history: Sequence[RecordedTurn],
                options: RenderOptions | None = None, *, known: Sequence[str] = (),
                matchers: Collection[str] = MATCHERS) -> Prompt | FullRender:
    """The prompt for chat ``body`` given the session's earlier turns: one that extends
    a turn is built here (its cost is what it adds); else the full render to run.
    ``known``: the message keys of the body's first messages, when a recorded turn sent
    them byte for byte (only the messages past them are keyed here)."""
    if options is None:
        options = render_options(body, renderer.reserved)
    sent: list[dict[str, Any]] = body["messages"]
    fmt = renderer.content_format
    images = renderer.vision is not None
    tools = body.get("tools") or None
    context = context_key(body)
    seen = len(known) if len(known) < len(sent) else 0
    # Conversion before keys: a message both would refuse gets conversion's 400.
    converted = template_messages(sent[seen:], fmt, images=images)
    keys = list(known[:seen]) + [entry(m) for m in sent[seen:]]

    def messages_from(start: int) -> list[dict[str, Any]]:
        if start >= seen:
            return converted[start - seen:]
        return template_messages(sent[start:seen], fmt, images=images) + converted

    recorded = keys[:-1] if options.continue_final else keys
    prefix = _text(converted[-1].get("content")) if options.continue_final else None
    for turn in reversed(history):
        found = _extends(turn, sent, keys, context, matchers)
        if found is None:
            continue
        choice, fired = found
        completion = turn.choices[choice].token_ids
        end = completion[-1] if completion and completion[-1] in renderer.end_ids else None
        reply, *new = messages_from(len((turn.tito or {})["messages"]))
        system = None  # the first message when a system one (some templates write it late)
        if sent and sent[0].get("role") == "system":
            system = converted[0] if seen == 0 else template_messages(
                sent[:1], fmt, images=images)[0]
        suffix = renderer.suffix_text(new, tools, end=end, options=options, reply=reply,
                                      system=system)
        before = turn.prompt_ids()
        if end is None:  # cut short: close a reasoning block it left open first
            suffix = renderer.think_closing(before.ids[-_TAIL:], completion) + suffix
        added = array("i", completion) + array("i", renderer.encode(suffix))
        # Image placeholders: the turn's own (its record's), then the new ids'.
        vision = renderer.vision
        positions = [int(image["position"]) for image in (turn.tito or {}).get("images") or []
                     ] + vision.positions(added, len(before)) if vision else []
        return Prompt(before.extended(added), _opens(suffix, options), context, recorded,
                      extends={"interaction_id": turn.interaction_id, "choice": choice},
                      prefix=prefix, how=(
                          {"kind": "matched", "matchers": sorted(fired)} if fired
                          else {"kind": "extended"}), image_positions=positions)
    best = max(
        ((_common(recorded, (t.tito or {}).get("messages") or []), t.request_index, t)
         for t in history if t.tito and t.status < 400),
        key=lambda item: (item[0], item[1]), default=None,
    )
    forked = ({"interaction_id": best[2].interaction_id, "messages": best[0]}
              if best is not None and best[0] > 0 else None)
    message, what = rendered_reason(sent, recorded, context, matchers, None if best is None
                                    else (best[2].tito or {}), best[0] if best else 0)
    return FullRender(renderer, messages_from(0), tools, options, context, recorded, prefix,
                      forked, {"kind": "rendered", "reason": {"message": message, "what": what}})


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content)
    return content if isinstance(content, str) else ""


def reply_key(prompt: Prompt, message: dict[str, Any]) -> str:
    """The matching entry (key and facets) of a choice's reply: with a continued
    message, that message's content followed by the sampled content (what a client
    sends back)."""
    if prompt.prefix is None:
        return entry(message)
    return entry({**message, "content": prompt.prefix + (message.get("content") or "")})


def _opens(text: str, options: RenderOptions) -> bool:
    """Whether the prompt leaves a reasoning block open: the generation prompt opened
    one, or the continued message stops inside one."""
    if options.continue_final:
        return text.rfind("<think>") > text.rfind("</think>")
    return text.rstrip().endswith("<think>")


def tito_record(prompt: Prompt, replies: list[tuple[str, str]],
                images: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The interaction's ``tito`` field: keys for matching later turns, and lineage.
    ``replies`` holds (message entry, reasoning text) per choice; ``images`` the prompt's
    images (``vision.image_records``), kept only when it has any."""
    return {
        **({"images": images} if images else {}),
        "context": prompt.context,
        "messages": prompt.message_keys,
        "replies": [{"key": e.partition("|")[0], "reasoning": reasoning_key(reasoning),
                     "facets": e.partition("|")[2]} for e, reasoning in replies],
        "extends": prompt.extends,
        "forked_from": prompt.forked_from,
        "prompt": prompt.how,
    }


def rendered_reason(sent: list[dict[str, Any]], entries: list[str], context: str,
                    matchers: Collection[str], best: dict[str, Any] | None,
                    common: int) -> tuple[int | None, str]:
    """Why ``sent`` (its ``entries``) is rendered in full, against ``best`` (the ``tito``
    of the recorded turn sharing the longest prefix, ``common`` messages): the index of
    the first message no recorded turn continues (None: not the messages), and what."""
    if best is None:
        return None, "first turn"
    earlier: list[str] = best.get("messages") or []
    if common == 0:
        if len(earlier) > 1 and len(entries) > 1 and entry_key(earlier[1]) == entry_key(
                entries[1]):  # only the first message differs from the latest turn's
            return 0, f"the {sent[0].get('role')} message changed"
        return 0, "a new conversation: its first message opens no recorded turn"
    if best.get("context") != context and common >= min(len(earlier), len(entries)):
        return None, "the tools or template options changed"
    if common < len(earlier) and common < len(entries):
        return common, _changed(sent[common], earlier[common], entries[common], matchers)
    if common == len(entries) < len(earlier):
        return common, "the history stops inside a recorded turn's (later messages left out)"
    if common == len(earlier) < len(entries):
        role = sent[common].get("role")
        if role != "assistant":
            return common, f"a {role} message where the recorded turn's reply comes"
        for reply in best.get("replies") or []:
            recorded = _reply_entry(reply)
            if recorded is not None and differences(recorded, entries[common]) is not None:
                return common, _changed(sent[common], recorded, entries[common], matchers)
        return common, "the assistant message is not a reply sampled for the turn before it"
    return None, "the same messages as a recorded turn (a request sent again)"


def _changed(message: dict[str, Any], recorded: str, sent: str,
             matchers: Collection[str]) -> str:
    role = message.get("role")
    found = differences(recorded, sent)
    if found is None:
        return f"the {role} message changed"
    off = sorted(set(found) - set(matchers))
    return f"the {role} message differs by {', '.join(off)} (a matcher turned off)"
