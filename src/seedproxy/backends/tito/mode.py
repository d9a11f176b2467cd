"""Token-in-token-out mode: one object holding the renderer, the parsers and the
upstream dialect, built and checked once at start-up."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...errors import BadRequest, ConfigError
from ...tool_choice import tools_rendered
from .assistant import AssistantStream
from .decode import IncrementalDecoder, decoder_of
from .dialect import DIALECTS, Dialect
from .lineage import FullRender, Prompt, RecordedTurn, plan_prompt
from .reasoning import REASONING_PARSERS, ThinkParser
from .renderer import Renderer
from .sampling import Sampling, checked_forcing, sampling_of
from .tokenizer import load_tokenizer, read_template
from .tool_parsers import TOOL_PARSERS, ForcedCallParser, ToolParser

__all__ = ["TitoMode", "open_tito"]

_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
_PARSER_TAGS = ("<think>", "</think>", "<tool_call>", "</tool_call>", "[TOOL_CALLS]",
                "<|python_tag|>")


class TitoMode:
    def __init__(self, renderer: Renderer, dialect: Dialect, *, tool_parser: str | None,
                 reasoning_parser: str | None, model_name: str | None = None) -> None:
        self.renderer = renderer
        self.dialect = dialect
        self.model_name = model_name
        self._tool_parser = TOOL_PARSERS[tool_parser] if tool_parser else None
        self._reasoning = REASONING_PARSERS[reasoning_parser] if reasoning_parser else None
        tok = renderer.tokenizer
        keep = {i for t in _PARSER_TAGS for i in [tok.convert_tokens_to_ids(t)]
                if isinstance(i, int) and i != tok.unk_token_id}
        self.hidden = frozenset(int(i) for i in tok.all_special_ids) - keep
        self._decode = decoder_of(tok)
        self._vocab_size = len(tok)  # the wrapper's len() costs a microsecond a request
        self._token_texts: dict[int, str] = {}  # bounded by the vocabulary

    def prompt(self, body: dict[str, Any], history: Sequence[RecordedTurn], *,
               known: Sequence[str] = ()) -> Prompt:
        """The token prompt for chat ``body``; ``BadRequest`` before anything is sent."""
        plan = self.plan(body, history, known=known)
        return plan.run() if isinstance(plan, FullRender) else plan

    def plan(self, body: dict[str, Any], history: Sequence[RecordedTurn], *,
             known: Sequence[str] = ()) -> Prompt | FullRender:
        """``prompt``, with a full render left to run (``FullRender.run`` may also raise
        ``BadRequest``). ``known``: keys of its first messages, as a recorded turn sent
        them (those were checked then)."""
        for message in body["messages"][len(known):]:
            role = message.get("role")
            if not isinstance(role, str) or role not in _ROLES:  # a list is unhashable
                raise BadRequest(f"unsupported message role {str(role)[:64]!r}",
                                 param="messages")
        forcing = checked_forcing(body)
        if forcing is not None and forcing.name is not None:
            # SGLang's chat route renders only the named tool.
            body = {**body, "tools": tools_rendered(body, forcing)}
        return plan_prompt(self.renderer, body, history, known=known)

    def sampling(self, body: dict[str, Any]) -> Sampling:
        return sampling_of(body, self.renderer.stop_token_ids, carries=self.dialect.carries,
                           vocab_size=self._vocab_size,
                           reasoning=self._reasoning is not None)

    def assistant(self, prompt: Prompt, body: dict[str, Any]) -> AssistantStream:
        """A fresh parser chain for one choice of ``body``."""
        reasoning: ThinkParser | None = None
        if self._reasoning is not None:
            reasoning = self._reasoning(opened=prompt.opens_reasoning)
        sampling = self.sampling(body)
        tools: ToolParser | None = None
        if sampling.forcing is not None:
            tools = ForcedCallParser()
        elif self._tool_parser is not None and body.get("tools") and (
                body.get("tool_choice") != "none"):
            tools = self._tool_parser()
        decoder = IncrementalDecoder(self.renderer.tokenizer, self.hidden,
                                     decode=self._decode)
        return AssistantStream(decoder, reasoning, tools, sampling.stop,
                               continues=prompt.prefix is not None)

    def token_text(self, token_id: int) -> str:
        """One token's text as ``tokenizer.decode([token_id])`` gives it (cached)."""
        text = self._token_texts.get(token_id)
        if text is None:
            text = str(self.renderer.tokenizer.decode([token_id], skip_special_tokens=False))
            if 0 <= token_id < self._vocab_size:
                self._token_texts[token_id] = text
        return text


def open_tito(*, backend: str, auth: dict[str, str], tokenizer_path: str | None,
              tokenizer: Any = None, chat_template: str | None, tool_parser: str | None,
              reasoning_parser: str | None, model_name: str | None = None) -> TitoMode:
    """Load and check everything; ``ConfigError`` (one line, exit 2) on any problem."""
    if tool_parser is not None and tool_parser not in TOOL_PARSERS:
        raise ConfigError(f"unknown --tool-parser {tool_parser!r}; choose one of "
                          + ", ".join(sorted(TOOL_PARSERS)))
    if reasoning_parser is not None and reasoning_parser not in REASONING_PARSERS:
        raise ConfigError(f"unknown --reasoning-parser {reasoning_parser!r}; choose one of "
                          + ", ".join(sorted(REASONING_PARSERS)))
    if tokenizer is None:
        if tokenizer_path is None:
            raise ConfigError("--token-in-token-out needs --tokenizer PATH "
                              "(a model folder or a .gguf file)")
        tokenizer = load_tokenizer(tokenizer_path)
    template = read_template(chat_template) if chat_template else None
    renderer = Renderer(tokenizer, template)
    renderer.check()
    dialect = DIALECTS[backend](auth)
    return TitoMode(renderer, dialect, tool_parser=tool_parser,
                    reasoning_parser=reasoning_parser, model_name=model_name)
