"""The exported trajectory JSON, its fields named once: the server's export
(``sessions/``) writes these shapes and the client's typed views (``client/``) read
them. With ``n > 1`` the per-choice fields of an interaction hold one entry per
choice, in choice order."""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

__all__ = ["ConcatErrorJSON", "ConcatJSON", "InteractionJSON", "Style", "TrajectoryJSON",
           "WeightSpanJSON"]

Style = Literal["individual", "concat"]


class WeightSpanJSON(TypedDict):
    """Positions ``start..end-1`` were sampled by weight ``version``."""

    version: str
    start: int
    end: int


class ConcatErrorJSON(TypedDict):
    """Where a multi-turn trajectory stops being one token sequence (template drift).
    A token-in-token-out branch's error names only its ``interaction_id`` and
    ``reason`` (``reason`` alone when there are no turns)."""

    turn: NotRequired[int]
    interaction_id: NotRequired[str]
    request_index: NotRequired[int]
    reason: str
    position: NotRequired[int | None]


class InteractionJSON(TypedDict):
    """One recorded request. The ``NotRequired`` fields appear only when set."""

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
    finish_reason: str | None | list[str | None]
    reward: float | None
    latency_ms: float
    upstream: str | None
    abandoned: bool
    dispatch_weight_version: str | None
    weight_version: str | None | list[str | None]
    weight_versions: list[WeightSpanJSON] | list[list[WeightSpanJSON]]
    routed_experts: dict[str, Any] | None | list[dict[str, Any] | None]
    lineage: NotRequired[dict[str, Any]]
    images: NotRequired[list[dict[str, Any]]]
    content_key: NotRequired[str]
    occurrence: NotRequired[int | None]
    replayed: NotRequired[bool]
    """Answered from a resumed session's source record, with no upstream call."""
    compacted_from: NotRequired[str]
    """The interaction whose history this request's summary replaced."""
    left_out_tools: NotRequired[list[str]]
    branch: NotRequired[str | None]


class ConcatJSON(TypedDict, total=False):
    """A ``concat`` trajectory's own fields: one sequence, or None and
    ``concat_error`` (then ``interactions`` too); a token-in-token-out one adds a
    sequence per branch, linked."""

    token_ids: list[int] | None
    loss_mask: list[int] | None
    logprobs: list[float] | None
    weight_versions: list[WeightSpanJSON] | None
    interaction_ids: list[str]
    concat_error: ConcatErrorJSON | None
    interactions: list[InteractionJSON]
    branches: list[dict[str, Any]]
    chain: list[str]


class TrajectoryJSON(ConcatJSON):
    """An exported session: ``interactions`` (``individual``), or ``style: "concat"``
    and the ``ConcatJSON`` fields."""

    session_id: str
    identity: str
    group_id: str | None
    reward: float | None
    metadata: dict[str, Any]
    end_status: str | None
    """"ended" (its agent ended it) or "abandoned" (ended by the proxy, idle while an
    export waited on it: the rollout may be cut short)."""
    tito_prompts: NotRequired[dict[str, Any]]
    style: NotRequired[Style]
