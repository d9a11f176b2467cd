"""A concat-style export as training rows: one ``Segment`` per branch.

A token-in-token-out trajectory exports one exact sequence per branch (an edited or
compacted history starts a new one); a drift-checked trajectory exports one. Each
segment keeps the exported ``token_ids``, ``loss_mask`` (1 exactly on sampled tokens)
and ``logprobs`` unchanged, and names its rollout, its branch and the branch it came
from, so rows of one rollout stay linked. Nothing is guessed: a trajectory or branch
that the export could not make one sequence raises ``ValueError`` naming it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ._types import Trajectory

__all__ = ["Segment", "segments"]


@dataclass(frozen=True, slots=True)
class Segment:
    """One branch of one rollout, ready for a trainer's row."""

    session_id: str
    identity: str
    group_id: str | None
    reward: float | None
    branch_id: str
    branch_index: int
    """The branch's place among its rollout's branches (export order: first turn)."""
    parent_branch: str | None
    """The branch this one's first turn extended or forked from; None for the first."""
    compacted_from: str | None
    """The branch whose history this branch's first turn summarised, if any."""
    subagent_of: dict[str, Any] | None
    """``{interaction_id, tool_call_id}``: the tool call that started this sub-agent."""
    side_request: bool
    """A one-turn request without tools beside the main loop (a title, a summary)."""
    main: bool
    """A branch of the main conversation (the export's ``chain``)."""
    last: bool
    """The rollout's last segment (SkyRL's ``is_last_step``)."""
    interaction_ids: list[str]
    token_ids: list[int]
    loss_mask: list[int]
    logprobs: list[float] | None
    images: list[dict[str, Any]] = field(default_factory=list)
    """A vision rollout's images, each once: ``sha256``, ``media_type``, ``width``,
    ``height``, ``position`` (its placeholder's index in ``token_ids``), ``tokens`` (the
    ids the model's processor expands it to) and ``data`` (base64)."""

    @property
    def prompt_length(self) -> int:
        """Tokens before the first sampled one: the prompt every trainer splits off."""
        return next((i for i, m in enumerate(self.loss_mask) if m), len(self.loss_mask))

    def link(self) -> dict[str, Any]:
        """The fields that tie rows of one rollout together (carried in each trainer's
        free-form slot: verl ``extra_fields``, slime ``metadata``, ...), and a vision
        rollout's ``images`` there too (none of these formats has a field for image
        bytes that the converters could fill without the trainer's own processor)."""
        link: dict[str, Any] = {
            "session_id": self.session_id, "identity": self.identity,
            "group_id": self.group_id, "branch_id": self.branch_id,
            "branch_index": self.branch_index, "parent_branch": self.parent_branch,
            "compacted_from": self.compacted_from, "subagent_of": self.subagent_of,
            "side_request": self.side_request, "main": self.main,
        }
        if self.images:
            link["images"] = self.images
        return link


def segments(trajectories: Iterable[Trajectory]) -> list[Segment]:
    """Every trajectory's branches, in trajectory then branch order."""
    return [segment for trajectory in trajectories for segment in _of(trajectory)]


def _of(trajectory: Trajectory) -> list[Segment]:
    name = trajectory.session_id
    if trajectory.style != "concat":
        raise ValueError(f"session {name!r}: export with style='concat' to convert it")
    branches = trajectory.raw.get("branches")
    if branches is None:  # drift-checked: one sequence, or none and the reason
        if trajectory.concat_error is not None or trajectory.token_ids is None:
            reason = trajectory.concat_error.reason if trajectory.concat_error else "no tokens"
            raise ValueError(f"session {name!r} is not one token sequence: {reason}")
        ids = list(trajectory.raw.get("interaction_ids") or [])
        branches = [{"branch_id": ids[0] if ids else name, "parent": None,
                     "compacted_from": None, "interaction_ids": ids, "error": None,
                     "token_ids": trajectory.token_ids, "loss_mask": trajectory.loss_mask,
                     "logprobs": trajectory.logprobs}]
    out = []
    for index, branch in enumerate(branches):
        if branch.get("error") is not None:
            raise ValueError(f"session {name!r} branch {branch['branch_id']!r} is not one "
                             f"token sequence: {branch['error'].get('reason')}")
        tokens, mask = list(branch["token_ids"]), list(branch["loss_mask"])
        logprobs = branch.get("logprobs")
        if len(mask) != len(tokens) or (logprobs is not None and len(logprobs) != len(tokens)):
            raise ValueError(f"session {name!r} branch {branch['branch_id']!r}: "
                             "token_ids, loss_mask and logprobs differ in length")
        out.append(Segment(
            session_id=name, identity=trajectory.identity, group_id=trajectory.group_id,
            reward=trajectory.reward, branch_id=branch["branch_id"], branch_index=index,
            parent_branch=(branch.get("parent") or {}).get("branch"),
            compacted_from=(branch.get("compacted_from") or {}).get("branch"),
            subagent_of=branch.get("subagent_of"),
            side_request=bool(branch.get("side_request")), main=bool(branch.get("main", True)),
            last=index == len(branches) - 1,
            interaction_ids=list(branch.get("interaction_ids") or []),
            token_ids=tokens, loss_mask=mask,
            logprobs=None if logprobs is None else list(logprobs),
            images=list(branch.get("images") or [])))
    return out
