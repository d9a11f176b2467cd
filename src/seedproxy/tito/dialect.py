"""Token-prompt requests upstream, and reading the sampled ids back.

- ``GenerateDialect`` (SGLang and the embedded engine): ``POST /generate``, the seed as
  ``sampling_seed``. Streamed chunks are cumulative (SGLang's default); incremental
  chunks are recognised by ``meta_info.completion_tokens``. Constraints go under the
  ``sampling_params`` key SGLang's chat route writes (``Constraint.param``), and with
  a reasoning parser a constrained request carries ``require_reasoning`` (the grammar
  starts after the reasoning).
- ``CompletionsDialect`` (vLLM, OpenAI-compatible servers that take token prompts):
  ``POST /v1/completions`` with ``prompt`` as ids. ``response_format`` goes as is
  (vLLM's completions map it as its chat route does); ``regex`` / ``ebnf`` /
  ``json_schema`` become ``structured_outputs`` (vLLM >= 0.10.2). ``stop_regex`` has no
  equivalent there, nor a forcing ``tool_choice`` (vLLM's chat route builds its own
  grammar for it, and reads the named tool's arguments bare).

``carries`` is each dialect's table of the optional fields it carries; any other is
refused by ``sampling_of`` (a 400 naming it) before anything is sent. A reader raises
``MalformedAnswer`` (a 502 naming the field) on an answer without the ids it promised;
anything else it raises is a bug.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..sessions.token_ids import TokenIds
from ..wire.answer_shape import MalformedAnswer
from ..wire.shapes import ints
from ..wire.types import UpstreamRequest
from .sampling import CARRIABLE, Sampling

__all__ = ["CompletionsDialect", "Dialect", "GenerateDialect", "Sample"]


@dataclass(slots=True)
class Sample:
    """One choice as sampled: ids (stop token included), their logprobs, the end."""

    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    top_logprobs: list[list[tuple[int, float]]] = field(default_factory=list)
    finish: str | None = None
    matched: int | str | None = None
    """The stop string or stop token id that ended it, when one did (SGLang's
    ``finish_reason.matched``, vLLM's ``stop_reason``)."""
    versions: dict[str, Any] = field(default_factory=dict)
    """The last ``meta_info``'s ``weight_version`` and ``weight_versions``, as sent."""


def _ids(value: Any, where: str) -> list[int]:
    ids = ints(value) if isinstance(value, list) else []
    if not isinstance(value, list) or (value and not ids):
        raise MalformedAnswer(f"upstream answer: {where} is not a list of token ids")
    return ids


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise MalformedAnswer(f"upstream answer: {where} is not an object")
    return value


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise MalformedAnswer(f"upstream answer: {where} is not a number")
    return float(value)


def _matched(value: Any) -> int | str | None:
    """A stop string or token id as the upstream named it; anything else is none."""
    return value if isinstance(value, str) or type(value) is int else None


def _logprob_rows(value: Any, where: str) -> list[list[Any]]:
    """SGLang's ``[[logprob, token_id, text], ...]`` rows (absent: none)."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(r, list) and len(r) >= 2 for r in value):
        raise MalformedAnswer(f"upstream answer: {where} is not a list of [logprob, id] rows")
    return value


class Dialect:
    path: ClassVar[str]
    carries: ClassVar[frozenset[str]]
    """The fields out of ``CARRIABLE`` this dialect puts on its request."""
    takes_images: ClassVar[bool] = False
    """Whether a request carries the prompt's images (``request``'s ``images``)."""

    def __init__(self, auth: dict[str, str]) -> None:
        self._auth = auth

    def request(self, ids: TokenIds, sampling: Sampling, seed: int | None,
                stream: bool, model: Any, images: Sequence[str] = ()) -> UpstreamRequest:
        """``images``: the prompt's images in order, one placeholder id each in ``ids``
        (data URLs; only a dialect that ``takes_images`` is given any)."""
        raise NotImplementedError

    def read(self, answer: Any) -> Sample:
        """A whole (non-streamed) answer."""
        reader = self.reader()
        reader.feed(answer)
        return reader.result()

    def reader(self) -> Reader:
        raise NotImplementedError


class Reader:
    """Takes stream events; ``feed`` returns the ids that are new in this event."""

    def __init__(self) -> None:
        self._sample = Sample()

    def feed(self, event: Any) -> list[int]:
        raise NotImplementedError

    def result(self) -> Sample:
        return self._sample


def _sampling_fields(sampling: Sampling, out: dict[str, Any], seed_key: str,
                     seed: int | None) -> None:
    """The fields both dialects name alike (those set), and the seed as ``seed_key``."""
    fields = {key: getattr(sampling, key) for key in ("temperature", "top_p", "top_k", "min_p")}
    fields.update(stop=list(sampling.stop) or None, ignore_eos=sampling.ignore_eos or None)
    fields[seed_key] = seed
    fields.update((key, getattr(sampling, key)) for key in (
        "frequency_penalty", "presence_penalty", "repetition_penalty"))
    fields["logit_bias"] = {str(i): bias for i, bias in sampling.logit_bias} or None
    out.update((key, value) for key, value in fields.items() if value is not None)


class GenerateDialect(Dialect):
    path = "/generate"
    carries = CARRIABLE
    takes_images = True

    def request(self, ids: TokenIds, sampling: Sampling, seed: int | None,
                stream: bool, model: Any, images: Sequence[str] = ()) -> UpstreamRequest:
        # max_new_tokens always: null (no max_tokens asked) is "up to the context", as on
        # the chat route; left out, /generate would stop at 128.
        params: dict[str, Any] = {"skip_special_tokens": False, "no_stop_trim": True,
                                  "max_new_tokens": sampling.max_new_tokens,
                                  "stop_token_ids": list(sampling.stop_token_ids)}
        _sampling_fields(sampling, params, "sampling_seed", seed)
        if sampling.stop_regex:
            params["stop_regex"] = list(sampling.stop_regex)
        constraint = sampling.constraint
        if constraint is not None:
            params[constraint.param] = constraint.source
        body: dict[str, Any] = {"input_ids": ids, "sampling_params": params,
                                "return_logprob": True, "stream": stream}
        if images:
            body["image_data"] = list(images)
        if sampling.top_logprobs:
            body["top_logprobs_num"] = sampling.top_logprobs
        if constraint is not None and sampling.require_reasoning:
            body["require_reasoning"] = True
        return UpstreamRequest(self.path, body, dict(self._auth))

    def reader(self) -> Reader:
        return _GenerateReader()


class _GenerateReader(Reader):
    def feed(self, event: Any) -> list[int]:
        if isinstance(event, list) and len(event) == 1:
            event = event[0]
        item = _object(event, "the answer")
        meta = _object(item.get("meta_info"), "meta_info")
        ids = _ids(item.get("output_ids"), "output_ids")
        entries = _logprob_rows(meta.get("output_token_logprobs"), "output_token_logprobs")
        logprobs = [_number(e[0], "output_token_logprobs") for e in entries]
        top = meta.get("output_top_logprobs") or []
        if not isinstance(top, list) or not all(isinstance(row, list) for row in top):
            raise MalformedAnswer("upstream answer: output_top_logprobs is not a list of lists")
        sample = self._sample
        if meta.get("completion_tokens") == len(ids) or not sample.token_ids:  # cumulative
            new = ids[len(sample.token_ids):]
            sample.token_ids = list(ids)
            sample.logprobs = logprobs
            sample.top_logprobs = [
                [(_ids([t[1]], "output_top_logprobs")[0], _number(t[0], "output_top_logprobs"))
                 for t in _logprob_rows(row, "output_top_logprobs")]
                for row in top
            ]
        else:
            new = ids
            sample.token_ids += ids
            sample.logprobs += logprobs
        sample.versions = {k: meta[k] for k in ("weight_version", "weight_versions") if k in meta}
        finish = meta.get("finish_reason")
        if isinstance(finish, dict):
            kind = finish.get("type")
            sample.finish = kind if isinstance(kind, str) else "stop"
            sample.matched = _matched(finish.get("matched"))
        return new


_STRUCTURED_OUTPUTS = {"regex": "regex", "ebnf": "grammar", "json_schema": "json"}


class CompletionsDialect(Dialect):
    path = "/v1/completions"
    carries = CARRIABLE - {"stop_regex", "tool_choice"}

    def request(self, ids: TokenIds, sampling: Sampling, seed: int | None,
                stream: bool, model: Any, images: Sequence[str] = ()) -> UpstreamRequest:
        assert not images, "this dialect takes no images (takes_images)"
        body: dict[str, Any] = {
            "model": model, "prompt": ids, "return_token_ids": True,
            "logprobs": max(1, sampling.top_logprobs), "skip_special_tokens": False,
            "include_stop_str_in_output": True, "stream": stream,
            "stop_token_ids": list(sampling.stop_token_ids),
            # Always: null (no max_tokens asked) is "up to the context" in vLLM, as on its
            # chat route; left out, /v1/completions stops at 16.
            "max_tokens": sampling.max_new_tokens,
        }
        _sampling_fields(sampling, body, "seed", seed)
        constraint = sampling.constraint
        if constraint is not None and constraint.response_format is not None:
            body["response_format"] = constraint.response_format
        elif constraint is not None:
            body["structured_outputs"] = {_STRUCTURED_OUTPUTS[constraint.field]:
                                          constraint.source}
        return UpstreamRequest(self.path, body, dict(self._auth))

    def reader(self) -> Reader:
        return _CompletionsReader()


class _CompletionsReader(Reader):
    """Ids arrive as deltas when streaming and whole otherwise: both append."""

    def feed(self, event: Any) -> list[int]:
        choices = _object(event, "the answer").get("choices")
        if not isinstance(choices, list):
            raise MalformedAnswer("upstream answer: choices is not a list")
        if not choices:
            return []
        choice = _object(choices[0], "choices[0]")
        new = _ids(choice.get("token_ids"), "choices[0].token_ids")
        self._sample.token_ids += new
        logprobs = choice.get("logprobs")
        if isinstance(logprobs, dict):
            values = logprobs.get("token_logprobs") or []
            if not isinstance(values, list):
                raise MalformedAnswer("upstream answer: token_logprobs is not a list")
            self._sample.logprobs += [_number(v, "token_logprobs") for v in values]
        reason = choice.get("finish_reason")
        if isinstance(reason, str):
            self._sample.finish = reason
            self._sample.matched = _matched(choice.get("stop_reason"))
        return new

