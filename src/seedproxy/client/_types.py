"""Typed views of the proxy's trajectory JSON (its fields: ``seedproxy.trajectory``).
A ``Trajectory`` keeps the JSON it was built from (``raw``), so writing it back out is
lossless and byte-stable."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import orjson

from ..trajectory import InteractionJSON, Style, TrajectoryJSON, WeightSpanJSON

__all__ = ["ConcatError", "Interaction", "Style", "Trajectory"]


@dataclass(frozen=True, slots=True)
class Interaction:
    """One recorded request (``InteractionJSON``)."""

    interaction_id: str
    request_index: int
    seed: int | list[int] | None
    endpoint: str
    status: int
    request: Any
    response: Any
    prompt_token_ids: list[int]
    completion_token_ids: list[int] | list[list[int]]
    logprobs: list[float] | list[list[float]]
    finish_reason: str | list[str | None] | None
    reward: float | None
    latency_ms: float
    upstream: str | None
    replayed: bool = False
    compacted_from: str | None = None

    @classmethod
    def from_json(cls, data: InteractionJSON) -> Interaction:
        return cls(
            interaction_id=data["interaction_id"],
            request_index=data["request_index"],
            seed=data.get("seed"),
            endpoint=data["endpoint"],
            status=data.get("status", 200),
            request=data.get("request"),
            response=data.get("response"),
            prompt_token_ids=list(data.get("prompt_token_ids") or []),
            completion_token_ids=(data.get("completion_token_ids") or [])[:],
            logprobs=(data.get("logprobs") or [])[:],
            finish_reason=data.get("finish_reason"),
            reward=data.get("reward"),
            latency_ms=data.get("latency_ms", 0.0),
            upstream=data.get("upstream"),
            replayed=data.get("replayed", False),
            compacted_from=data.get("compacted_from"),
        )


@dataclass(frozen=True, slots=True)
class ConcatError:
    """Where a multi-turn trajectory stops being one token sequence (``ConcatErrorJSON``:
    a token-in-token-out branch's names no turn, index or position)."""

    turn: int | None = None
    interaction_id: str | None = None
    request_index: int | None = None
    reason: str = ""
    position: int | None = None


@dataclass(frozen=True, slots=True)
class Trajectory:
    """An exported session. ``style == "concat"`` fills ``token_ids``, ``loss_mask``
    and ``logprobs`` (None when ``concat_error`` says why); ``interactions`` is empty
    for a valid concat record."""

    session_id: str
    identity: str
    group_id: str | None
    reward: float | None
    metadata: dict[str, Any]
    style: Style
    interactions: list[Interaction]
    token_ids: list[int] | None = None
    loss_mask: list[int] | None = None
    logprobs: list[float] | None = None
    weight_versions: list[WeightSpanJSON] | None = None
    """Concat: the weight version that sampled each generated token's position."""
    concat_error: ConcatError | None = None
    end_status: str | None = None
    raw: TrajectoryJSON = field(default_factory=lambda: cast(TrajectoryJSON, {}), repr=False,
                                compare=False)

    @classmethod
    def from_json(cls, data: TrajectoryJSON) -> Trajectory:
        error = data.get("concat_error")
        return cls(
            session_id=data["session_id"],
            identity=data["identity"],
            group_id=data.get("group_id"),
            reward=data.get("reward"),
            metadata=dict(data.get("metadata") or {}),
            style="concat" if data.get("style") == "concat" else "individual",
            interactions=[Interaction.from_json(i) for i in data.get("interactions") or []],
            token_ids=data.get("token_ids"),
            loss_mask=data.get("loss_mask"),
            logprobs=data.get("logprobs"),
            weight_versions=data.get("weight_versions"),
            concat_error=ConcatError(**error) if error else None,
            end_status=data.get("end_status"),
            raw=data,
        )

    def token_versions(self) -> list[str | None]:
        """Concat: the weight version of each of ``token_ids`` (None where no version was
        recorded: prompt tokens, or an upstream that reports none)."""
        versions: list[str | None] = [None] * len(self.token_ids or ())
        for span in self.weight_versions or ():
            for position in range(span["start"], min(span["end"], len(versions))):
                versions[position] = span["version"]
        return versions

    def to_json(self) -> bytes:
        """The record as the proxy sent it, keys sorted: the same bytes on every rerun
        of a deterministic rollout in one store (timings aside)."""
        return orjson.dumps(self.raw, option=orjson.OPT_SORT_KEYS)
