"""Token-in-token-out mode: one object holding the renderer, the parsers and the
upstream dialect, built and checked once at start-up."""

from __future__ import annotations

import datetime
from collections.abc import Collection, Sequence
from typing import Any

from ..detokenize import IncrementalDecoder, decoder_of
from ..errors import BadRequest, ConfigError
from ..tool_choice import tools_rendered
from .assistant import AssistantStream
from .dialect import Dialect
from .facets import MATCHERS, matchers_of
from .harmony import MARKERS as HARMONY_MARKERS
from .lineage import FullRender, Prompt, RecordedTurn, plan_prompt
from .markers import MarkerGuard, id_markers
from .reasoning import REASONING_PARSERS, ThinkParser
from .renderer import Renderer
from .sampling import Sampling, checked_forcing, sampling_of
from .template_check import check as check_template
from .tokenizer import generation_eos_ids, load_tokenizer, read_template
from .tool_parsers import TOOL_PARSERS, ForcedCallParser, ToolParser
from .vision import vision_of

__all__ = ["TitoMode", "open_tito"]

_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
_PARSER_TAGS = ("<think>", "</think>", "<tool_call>", "</tool_call>", "[TOOL_CALLS]",
                "<|python_tag|>")
"""Tags kept in the decoded text whichever parsers are on (a reply shows them as text
when no parser reads them, as SGLang's chat route does)."""


class TitoMode:
    def __init__(self, renderer: Renderer, dialect: Dialect, *, tool_parser: str | None,
                 reasoning_parser: str | None, model_name: str | None = None,
                 structural_tags: bool = True, matchers: frozenset[str] = frozenset(MATCHERS)
                 ) -> None:
        """``structural_tags``: whether tool calls get the parser's structural tag (as on
        SGLang; not in front of the embedded engine, whose llguidance tags force no call).
        ``matchers``: those that may map a resent history onto the recorded turns."""
        self.renderer = renderer
        self.matchers = matchers
        self.dialect = dialect
        self.model_name = model_name
        self._tool_parser = TOOL_PARSERS[tool_parser] if tool_parser else None
        self._tagged_parser = self._tool_parser if structural_tags else None
        self._reasoning = REASONING_PARSERS[reasoning_parser] if reasoning_parser else None
        think = self._reasoning if self._reasoning is not None and issubclass(
            self._reasoning, ThinkParser) else None
        # The think tags a structural tag leaves free (harmony's channels are none).
        self._think = (think.open_tag, think.close_tag) if think else ()
        tok = renderer.tokenizer
        self.stop_token_ids = renderer.stop_token_ids
        tool = self._tool_parser or ToolParser
        keep = _ids_of(tok, {*_PARSER_TAGS, *tool.markers,
                             *(self._reasoning.markers() if self._reasoning else ()),
                             *(HARMONY_MARKERS if renderer.harmony else ())})
        # An end of turn is never text, special to the tokenizer or not (Gemma's
        # <end_of_turn> is an ordinary added token), unless the tool parser reads it.
        self.hidden = (frozenset(int(i) for i in tok.all_special_ids) - keep) | (
            frozenset(self.stop_token_ids) - _ids_of(tok, tool.kept_stops))
        self._marker_ids = id_markers(tok, [*tool.markers, *(
            (think.tool_start,) if think and think.tool_start else ())])
        """Parser markers that are one added token: read from ids (``markers``)."""
        self._decode = decoder_of(tok)
        self._vocab_size = len(tok)  # the wrapper's len() costs a microsecond a request
        self._token_texts: dict[int, str] = {}  # bounded by the vocabulary

    def plan(self, body: dict[str, Any], history: Sequence[RecordedTurn], *,
             known: Sequence[str] = ()) -> Prompt | FullRender:
        """The token prompt for chat ``body``, or its full render left to run;
        ``BadRequest`` (from ``FullRender.run`` too) before anything is sent. ``known``:
        keys of its first messages, as a recorded turn sent them (checked then)."""
        for message in body["messages"][len(known):]:
            role = message.get("role")
            if not isinstance(role, str) or role not in _ROLES:  # a list is unhashable
                raise BadRequest(f"unsupported message role {str(role)[:64]!r}",
                                 param="messages")
        kwargs = body.get("chat_template_kwargs")
        if self.renderer.vision is not None and isinstance(kwargs, dict) and kwargs.get(
                "add_vision_id"):
            # It numbers images across the conversation: a new turn's text would restart
            # at "Picture 1", so no turn could extend the recorded prompt.
            raise BadRequest("chat_template_kwargs: add_vision_id is not supported in "
                             "token-in-token-out mode (it numbers images across turns)",
                             param="chat_template_kwargs")
        forcing = checked_forcing(body)
        if body.get("tools") and (body.get("tool_choice") == "none" or (
                forcing is not None and forcing.name is not None)):
            # SGLang's chat route renders no tool for "none", only the named one.
            body = {**body, "tools": tools_rendered(body, forcing)}
        return plan_prompt(self.renderer, body, history, known=known, matchers=self.matchers)

    def count_prompt(self, body: dict[str, Any]) -> int:
        """The ids of chat ``body``'s prompt rendered whole, as a fresh session would
        send it (``/v1/messages/count_tokens``); ``BadRequest`` when it cannot render."""
        plan = self.plan(body, [])
        return len((plan.run() if isinstance(plan, FullRender) else plan).ids)

    def sampling(self, body: dict[str, Any]) -> Sampling:
        return sampling_of(body, self.stop_token_ids, carries=self.dialect.carries,
                           vocab_size=self._vocab_size,
                           reasoning=self._reasoning is not None,
                           tool_parser=self._tagged_parser, think=self._think)

    def assistant(self, prompt: Prompt, body: dict[str, Any],
                  sampling: Sampling | None = None) -> AssistantStream:
        """A fresh parser chain for one choice of ``body`` (``sampling``: its
        ``sampling(body)``, when the caller holds it already)."""
        reasoning = self._reasoning(opened=prompt.opens_reasoning) if self._reasoning else None
        if sampling is None:
            sampling = self.sampling(body)
        tools: ToolParser | None = None
        tagged = sampling.constraint is not None and sampling.constraint.structural
        if sampling.forcing is not None and not tagged:
            tools = ForcedCallParser()
        elif self._tool_parser is not None and body.get("tools") and (
                body.get("tool_choice") != "none"):
            tools = self._tool_parser(body["tools"])
        decoder = IncrementalDecoder(self._decode, self.hidden)
        earlier = sum(len(m["tool_calls"]) for m in body["messages"] if isinstance(m, dict)
                      and m.get("role") == "assistant" and isinstance(m.get("tool_calls"), list)
                      ) if tools is not None and tools.numbered else 0
        return AssistantStream(decoder, reasoning, tools, sampling.stop,
                               continues=prompt.prefix is not None, earlier_calls=earlier,
                               guard=MarkerGuard(self._marker_ids))

    def token_text(self, token_id: int) -> str:
        """One token's text as ``tokenizer.decode([token_id])`` gives it (cached)."""
        text = self._token_texts.get(token_id)
        if text is None:
            text = str(self.renderer.tokenizer.decode([token_id], skip_special_tokens=False))
            if 0 <= token_id < self._vocab_size:
                self._token_texts[token_id] = text
        return text


def _ids_of(tok: Any, tokens: Any) -> frozenset[int]:
    """The ids of those of ``tokens`` that are single tokens of ``tok``."""
    return frozenset(i for t in tokens for i in [tok.convert_tokens_to_ids(t)]
                     if isinstance(i, int) and i != tok.unk_token_id)


def open_tito(*, dialect: Dialect, tokenizer_path: str | None,
              tokenizer: Any = None, chat_template: str | None, tool_parser: str | None,
              reasoning_parser: str | None, model_name: str | None = None,
              today: datetime.date | None = None, structural_tags: bool = True,
              matchers: str = "default") -> TitoMode:
    """Load and check everything; ``ConfigError`` (one line, exit 2) on any problem.
    ``dialect``: the upstream kind's (``Backend.tito``)."""
    named: list[tuple[str, str | None, Collection[str]]] = [
        ("tool", tool_parser, TOOL_PARSERS), ("reasoning", reasoning_parser, REASONING_PARSERS)]
    for kind, name, known in named:
        if name is not None and name not in known:
            raise ConfigError(f"unknown --{kind}-parser {name!r}; choose one of "
                              + ", ".join(sorted(known)))
    eos_ids: tuple[int, ...] = ()
    if tokenizer is None:
        if tokenizer_path is None:
            raise ConfigError("--token-in-token-out needs --tokenizer PATH "
                              "(a model folder or a .gguf file)")
        tokenizer = load_tokenizer(tokenizer_path)
        eos_ids = generation_eos_ids(tokenizer_path)
    template = read_template(chat_template) if chat_template else None
    vision = vision_of(tokenizer, template or str(getattr(tokenizer, "chat_template", "")),
                       tokenizer_path)
    renderer = Renderer(tokenizer, template, today=today, eos_ids=eos_ids, vision=vision)
    check_template(renderer)
    return TitoMode(renderer, dialect, tool_parser=tool_parser,
                    reasoning_parser=reasoning_parser, model_name=model_name,
                    structural_tags=structural_tags, matchers=matchers_of(matchers))
