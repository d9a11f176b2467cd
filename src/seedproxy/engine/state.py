"""What the routes share: the model, its worker, prompt validation and a record of how
generations ended.

Invariants:
- Every prompt reaching the worker is non-empty, made of in-vocabulary ids, and strictly
  shorter than the context, so generation itself cannot fail on bad input.
- ``JobLog`` keeps the last ``maxlen`` final updates by rid (a bounded deque, appended
  from the worker thread): operators and tests can see that an abandoned job was aborted.
"""

from __future__ import annotations

import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from ..template_input import content_format, reserved_names
from .errors import RequestError
from .generator import Update
from .grammar import GrammarCompiler
from .model import EngineModel
from .processors import ProcessorFactory
from .worker import Worker

__all__ = ["EngineState", "Finished", "JobLog", "new_id"]


@dataclass(frozen=True)
class Finished:
    rid: str
    finish_type: str
    completion_tokens: int


class JobLog:
    """The most recent final updates (thread-safe: ``deque.append`` is atomic)."""

    def __init__(self, maxlen: int = 256) -> None:
        self._done: deque[Finished] = deque(maxlen=maxlen)

    def record(self, rid: str, upd: Update) -> None:
        fin = upd.finish or {}
        self._done.append(Finished(rid, str(fin.get("type")), upd.completion_tokens))

    def find(self, rid: str) -> Finished | None:
        """The latest record for ``rid``, or None."""
        return next((f for f in reversed(self._done) if f.rid == rid), None)


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
