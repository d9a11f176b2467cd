"""Concat-style exports in the formats RL trainers consume, one function per trainer.

Every converter takes trajectories exported with ``style="concat"`` and gives one row
per branch (``_segments.py``): tokens the policy sampled have mask 1 and their recorded
logprobs; prompt, tool-result and user tokens have mask 0 (logprob 0.0). Each row
carries the rollout's reward and, where the format has a free slot, its link and images
(``Segment.link``). The converters are pure (plain lists and dicts, no trainer
imported); field names follow each project's source, quoted per function.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ._segments import Segment, segments
from ._types import Trajectory

__all__ = ["to_skyrl", "to_slime", "to_tinker", "to_tinker_objects", "to_trl", "to_verl"]


def to_verl(trajectories: Iterable[Trajectory]) -> list[dict[str, Any]]:
    """Rows with the fields of verl's ``AgentLoopOutput``
    (``verl/experimental/agent_loop/agent_loop.py``): ``prompt_ids``, ``response_ids``
    (sampled and tool tokens after the prompt), ``response_mask`` (1 sampled, 0 tool),
    ``response_logprobs`` (which verl's post-processing batches as
    ``rollout_log_probs``), ``reward_score``, ``metrics`` and ``extra_fields`` (the
    link). ``AgentLoopOutput(**row)`` builds verl's object; a rollout with several
    branches gives verl the ordered list its agent loop may return."""
    return [{
        "prompt_ids": s.token_ids[:p], "response_ids": s.token_ids[p:],
        "response_mask": s.loss_mask[p:],
        "response_logprobs": None if s.logprobs is None else s.logprobs[p:],
        "reward_score": s.reward, "metrics": {}, "extra_fields": s.link(),
    } for s, p in _cut(segments(trajectories))]


def to_slime(trajectories: Iterable[Trajectory]) -> list[dict[str, Any]]:
    """``Sample.to_dict()``-shaped rows of slime's ``Sample`` (``slime/utils/types.py``):
    ``tokens`` (prompt + response), ``response_length``, ``loss_mask`` and
    ``rollout_log_probs`` over the response only (length ``response_length``, as
    slime checks), ``reward``, ``group_index`` (the group's place in the input),
    ``index`` (the row's), ``session_id``, ``status`` and ``metadata`` (the link).
    ``Sample.from_dict(row)`` builds slime's object."""
    groups, _ = _positions(segs := segments(trajectories))
    return [{
        "group_index": groups[s.session_id], "index": index, "tokens": s.token_ids,
        "response_length": len(s.token_ids) - p, "loss_mask": s.loss_mask[p:],
        "rollout_log_probs": None if s.logprobs is None else s.logprobs[p:],
        "reward": s.reward, "status": "completed", "session_id": s.session_id,
        "metadata": s.link(),
    } for index, (s, p) in enumerate(_cut(segs))]


def to_trl(trajectories: Iterable[Trajectory]) -> dict[str, list[Any]]:
    """What TRL's ``GRPOTrainer`` takes from a ``rollout_func``
    (``trl/trainer/grpo_trainer.py``): ``prompt_ids``, ``completion_ids``,
    ``logprobs`` (one list per completion), and ``env_mask``, which TRL reads as its
    tool mask (0 on tool and user tokens inside the completion). The other keys,
    ``reward`` and ``rollout`` (the link), TRL forwards to the reward functions, one
    value per completion. TRL groups completions by position (``num_generations``
    per prompt): a rollout with several branches adds one completion per branch."""
    cut = _cut(segments(trajectories))
    return {"prompt_ids": [s.token_ids[:p] for s, p in cut],
            "completion_ids": [s.token_ids[p:] for s, p in cut],
            "logprobs": [_logprobs(s)[p:] for s, p in cut],
            "env_mask": [s.loss_mask[p:] for s, p in cut],
            "reward": [s.reward for s, _ in cut], "rollout": [s.link() for s, _ in cut]}


def to_skyrl(trajectories: Iterable[Trajectory]) -> dict[str, Any]:
    """SkyRL's ``GeneratorOutput`` (``skyrl-train/skyrl_train/generators/base.py``), a
    TypedDict with every key present: ``prompt_token_ids``, ``response_ids``,
    ``rewards`` (one float per row), ``loss_masks``, ``rollout_logprobs``,
    ``trajectory_ids`` (``{"instance_id", "repetition_id"}``, the fields of SkyRL's
    ``TrajectoryID``: the group and the sample's place in it), ``is_last_step``
    (step-wise rows: a rollout's branches in order, the last marked True), and
    ``stop_reasons``, ``rollout_metrics`` and ``sampling_masks`` as None."""
    segs = segments(trajectories)
    _, repetition = _positions(segs)
    with_images = next((s for s in segs if s.images), None)
    if with_images is not None:  # a row without its images would train on other inputs
        raise ValueError(f"session {with_images.session_id!r} holds images, and SkyRL's "
                         "GeneratorOutput has no field to carry them")
    out: dict[str, Any] = {
        "prompt_token_ids": [], "response_ids": [], "rewards": [], "loss_masks": [],
        "stop_reasons": None, "rollout_metrics": None, "rollout_logprobs": [],
        "trajectory_ids": [], "is_last_step": [], "sampling_masks": None,
    }
    for s, p in _cut(segs):
        out["prompt_token_ids"].append(s.token_ids[:p])
        out["response_ids"].append(s.token_ids[p:])
        out["rewards"].append(_reward(s))
        out["loss_masks"].append(s.loss_mask[p:])
        out["rollout_logprobs"].append(_logprobs(s)[p:])
        out["trajectory_ids"].append({"instance_id": s.group_id or s.identity,
                                      "repetition_id": repetition[s.session_id]})
        out["is_last_step"].append(s.last)
    return out


def to_tinker(trajectories: Iterable[Trajectory], advantages: Sequence[float] | None = None
              ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(datums, metadata) as tinker-cookbook's ``assemble_training_data`` makes them
    (``tinker_cookbook/rl/data_processing.py``): each datum is ``{"model_input":
    tokens[:-1], "loss_fn_inputs": {"target_tokens": tokens[1:], "logprobs",
    "advantages"}}``, shifted by one as the cookbook does, for Tinker's
    ``importance_sampling`` loss. A row's advantage is ``advantages[i]`` for the i-th
    trajectory (default: its reward) on sampled tokens and 0.0 elsewhere, so tool and
    user tokens carry no gradient. ``metadata`` holds each row's link and its mask."""
    listed = list(trajectories)
    if advantages is not None and len(advantages) != len(listed):
        raise ValueError(f"{len(advantages)} advantages for {len(listed)} trajectories")
    datums, metadata = [], []
    for i, trajectory in enumerate(listed):
        for s in segments([trajectory]):
            advantage = _reward(s) if advantages is None else float(advantages[i])
            logprobs = _logprobs(s)
            datums.append({"model_input": s.token_ids[:-1], "loss_fn_inputs": {
                "target_tokens": s.token_ids[1:], "logprobs": logprobs[1:],
                "advantages": [advantage if m else 0.0 for m in s.loss_mask[1:]]}})
            metadata.append({**s.link(), "mask": s.loss_mask[1:]})
    return datums, metadata


def to_tinker_objects(
    trajectories: Iterable[Trajectory], advantages: Sequence[float] | None = None
) -> tuple[list[Any], list[dict[str, Any]]]:
    """``to_tinker`` as ``tinker.Datum`` objects (needs ``pip install tinker``)."""
    import tinker

    datums, metadata = to_tinker(trajectories, advantages)
    return [tinker.Datum(model_input=tinker.ModelInput.from_ints(d["model_input"]),
                         loss_fn_inputs=d["loss_fn_inputs"]) for d in datums], metadata


def _positions(segs: list[Segment]) -> tuple[dict[str, int], dict[str, int]]:
    """(session -> its group's place among groups, session -> its place in its group),
    both in input order; a session in no group is a group of its own identity."""
    groups: dict[str, int] = {}
    sizes: dict[str, int] = {}
    group_of: dict[str, int] = {}
    repetition: dict[str, int] = {}
    for s in segs:
        if s.session_id not in group_of:
            key = s.group_id or s.identity
            group_of[s.session_id] = groups.setdefault(key, len(groups))
            repetition[s.session_id] = sizes[key] = sizes.get(key, -1) + 1
    return group_of, repetition


def _cut(segs: list[Segment]) -> list[tuple[Segment, int]]:
    """Each segment with its ``prompt_length``."""
    return [(s, s.prompt_length) for s in segs]


def _logprobs(s: Segment) -> list[float]:
    if s.logprobs is None:
        raise ValueError(f"session {s.session_id!r} branch {s.branch_id!r} has no logprobs")
    return s.logprobs


def _reward(s: Segment) -> float:
    if s.reward is None:
        raise ValueError(f"session {s.session_id!r} has no reward")
    return float(s.reward)
