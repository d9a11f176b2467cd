"""What one proxied request leaves behind for RL training.

Token ids and logprobs are held in ``array`` objects (4 bytes per id, 4 per logprob),
never lists of Python ints: a long rollout records thousands of tokens per turn.
Serialisation (``to_dict``/``from_dict``) is the single place that defines the wire
and storage shape, so every store saves the same thing and a new field costs one line.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ChoiceRecord", "Interaction"]


def _ids(values: Any) -> array[int]:
    return array("i", values or ())


def _floats(values: Any) -> array[float]:
    return array("f", values or ())


@dataclass(slots=True)
class ChoiceRecord:
    """The sampled tokens of one choice; ``logprobs[i]`` belongs to ``token_ids[i]``."""

    token_ids: array[int] = field(default_factory=lambda: array("i"))
    logprobs: array[float] = field(default_factory=lambda: array("f"))
    finish_reason: str | None = None

    @classmethod
    def of(cls, token_ids: Any, logprobs: Any, finish_reason: Any) -> ChoiceRecord:
        reason = finish_reason if isinstance(finish_reason, str) else None
        return cls(_ids(token_ids), _floats(logprobs), reason)


@dataclass(slots=True)
class Interaction:
    """One request/response pair in a session.

    ``interaction_id`` is unique within its session and stable across reruns
    (``i{index}``, or ``i{index}.{k}`` for the k-th extra request pinned to an index),
    so a replayed rollout exports byte-identical records. ``seeds`` holds one seed per
    choice, or is empty when no seed was derived (no-deterministic mode).
    """

    interaction_id: str
    request_index: int
    seeds: list[int]
    endpoint: str
    request: Any
    response: Any = None
    status: int = 200
    prompt_token_ids: array[int] = field(default_factory=lambda: array("i"))
    choices: list[ChoiceRecord] = field(default_factory=list)
    reward: float | None = None
    latency_ms: float = 0.0
    upstream: str | None = None
    content_key: str | None = None
    """Content-keyed sessions only: the request's content key and its occurrence."""
    occurrence: int | None = None

    @property
    def token_count(self) -> int:
        return len(self.prompt_token_ids) + sum(len(c.token_ids) for c in self.choices)

    def to_dict(self) -> dict[str, Any]:
        """Return the contract's JSON shape. ``n == 1`` gives flat per-choice fields;
        ``n > 1`` gives one list entry per choice, in choice order."""
        single = len(self.choices) <= 1
        first = self.choices[0] if self.choices else ChoiceRecord()
        shape = {
            "interaction_id": self.interaction_id,
            "request_index": self.request_index,
            "seed": (self.seeds[0] if self.seeds else None) if single else list(self.seeds),
            "endpoint": self.endpoint,
            "status": self.status,
            "request": self.request,
            "response": self.response,
            "prompt_token_ids": self.prompt_token_ids.tolist(),
            "completion_token_ids": (
                first.token_ids.tolist() if single else [c.token_ids.tolist() for c in self.choices]
            ),
            "logprobs": (
                first.logprobs.tolist() if single else [c.logprobs.tolist() for c in self.choices]
            ),
            "finish_reason": (
                first.finish_reason if single else [c.finish_reason for c in self.choices]
            ),
            "reward": self.reward,
            "latency_ms": self.latency_ms,
            "upstream": self.upstream,
        }
        if self.content_key is not None:
            shape["content_key"] = self.content_key
            shape["occurrence"] = self.occurrence
        return shape

    def to_storage(self) -> dict[str, Any]:
        """Return a lossless, JSON-serialisable form for durable stores."""
        return {
            "interaction_id": self.interaction_id,
            "request_index": self.request_index,
            "seeds": self.seeds,
            "endpoint": self.endpoint,
            "status": self.status,
            "request": self.request,
            "response": self.response,
            "prompt_token_ids": self.prompt_token_ids.tolist(),
            "choices": [
                {
                    "token_ids": c.token_ids.tolist(),
                    "logprobs": c.logprobs.tolist(),
                    "finish_reason": c.finish_reason,
                }
                for c in self.choices
            ],
            "reward": self.reward,
            "latency_ms": self.latency_ms,
            "upstream": self.upstream,
            "content_key": self.content_key,
            "occurrence": self.occurrence,
        }

    @classmethod
    def from_storage(cls, data: dict[str, Any]) -> Interaction:
        return cls(
            interaction_id=data["interaction_id"],
            request_index=data["request_index"],
            seeds=list(data["seeds"]),
            endpoint=data["endpoint"],
            status=data.get("status", 200),
            request=data.get("request"),
            response=data.get("response"),
            prompt_token_ids=_ids(data.get("prompt_token_ids")),
            choices=[
                ChoiceRecord(_ids(c["token_ids"]), _floats(c["logprobs"]), c["finish_reason"])
                for c in data.get("choices", ())
            ],
            reward=data.get("reward"),
            latency_ms=data.get("latency_ms", 0.0),
            upstream=data.get("upstream"),
            content_key=data.get("content_key"),
            occurrence=data.get("occurrence"),
        )
