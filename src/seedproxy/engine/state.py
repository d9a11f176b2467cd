"""What the routes share: the model, its worker, and prompt validation.

Invariant: every prompt reaching the worker is non-empty, made of in-vocabulary ids, and
strictly shorter than the context, so generation itself cannot fail on bad input.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from ..template_input import content_format, reserved_names
from .errors import RequestError
from .grammar import GrammarCompiler
from .jobs import JobLog
from .model import EngineModel
from .processors import ProcessorFactory
from .worker import Worker

__all__ = ["EngineState", "new_id"]


def new_id() -> str:
    return uuid.uuid4().hex


def request_id(body: dict[str, Any]) -> str:
    """The body's ``rid`` (as SGLang takes it, to name the request for
    ``/abort_request``), else a new id."""
    rid = body.get("rid")
    return rid if isinstance(rid, str) and rid else new_id()


@dataclass
class EngineState:
    model: EngineModel
    worker: Worker
    # Request features (grammars, penalties) and the record of finished jobs.
    processors: ProcessorFactory = field(init=False)
    jobs: JobLog = field(default_factory=JobLog)
    # The chat template's content format and the names its kwargs may not take (read
    # once: the template does not change).
    content_format: str = field(init=False)
    template_reserved: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        tok = self.model.tokenizer
        self.processors = ProcessorFactory(GrammarCompiler(
            tok, self.model.vocab_size, self.model.eos_token_ids))
        template = getattr(tok, "chat_template", None)
        self.content_format = content_format(template if isinstance(template, str) else "")
        self.template_reserved = reserved_names(tok)

    def check_prompt(self, ids: Any) -> list[int]:
        """Validate token ids; raise ``RequestError`` naming lengths when too long."""
        if not isinstance(ids, list) or not all(
            isinstance(t, int) and not isinstance(t, bool) for t in ids
        ):
            raise RequestError("input_ids must be a list of integers", param="input_ids")
        if not ids:
            raise RequestError("The input is empty: at least one token is required.")
        ctx = self.model.context_length
        if len(ids) >= ctx:
            raise RequestError(
                f"The input ({len(ids)} tokens) is longer than the model's context length "
                f"({ctx} tokens)."
            )
        vocab = self.model.vocab_size
        bad = next((t for t in ids if not 0 <= t < vocab), None)
        if bad is not None:
            raise RequestError(f"Token id {bad} is out of the vocabulary [0, {vocab}).")
        return ids

    def encode(self, text: Any, param: str = "text") -> list[int]:
        if not isinstance(text, str):
            raise RequestError(f"{param} must be a string", param=param)
        return self.check_prompt(list(self.model.tokenizer.encode(text,
                                                                  add_special_tokens=False)))
