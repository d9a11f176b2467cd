"""Token-in-token-out trajectories as branches: one exact token sequence per branch.

A turn whose prompt extends an earlier turn's prompt + completion (``tito.extends``)
continues that turn's branch when it is its first continuation (lowest request
index); a second continuation, or a full render (an edited, compacted or forked
history), starts a new branch whose ``parent`` says where it came from. Branches come
from the recorded lineage at export: arrival order changes nothing. Each sequence has
loss mask 1 exactly on sampled tokens, with their logprobs. A branch whose first turn
the client marked as a compaction (``compacted_from``) names the turn its summary
replaced and that turn's branch; ``trees.py`` infers the other links.
"""

from __future__ import annotations

from typing import Any

from ..trajectory import WeightSpanJSON
from .concat import sequence_spans
from .interaction import Interaction
from .media import sample_images

__all__ = ["branch_of", "branch_records", "is_tito"]


def is_tito(interactions: list[Interaction]) -> bool:
    return any(i.tito is not None for i in interactions)


def _turns(interactions: list[Interaction]) -> list[Interaction]:
    return [i for i in interactions if i.tito is not None and i.status < 400 and i.choices]


def branch_of(interactions: list[Interaction]) -> tuple[dict[str, str], dict[str, Any]]:
    """(interaction id -> branch id, branch id -> parent or None)."""
    branch: dict[str, str] = {}
    parents: dict[str, Any] = {}
    continued: set[str] = set()
    for turn in _turns(interactions):
        tito = turn.tito or {}
        extends = tito.get("extends")
        parent_id = extends.get("interaction_id") if isinstance(extends, dict) else None
        if parent_id in branch and parent_id not in continued:
            continued.add(parent_id)
            branch[turn.interaction_id] = branch[parent_id]
            continue
        branch[turn.interaction_id] = turn.interaction_id
        forked = tito.get("forked_from")
        if isinstance(extends, dict) and parent_id in branch:
            parents[turn.interaction_id] = {"branch": branch[parent_id], **extends}
        elif isinstance(forked, dict) and forked.get("interaction_id") in branch:
            parents[turn.interaction_id] = {"branch": branch[forked["interaction_id"]], **forked}
        else:
            parents[turn.interaction_id] = None
    return branch, parents


def branch_records(interactions: list[Interaction]) -> list[dict[str, Any]]:
    """One record per branch, in order of first turn."""
    branch, parents = branch_of(interactions)
    turns = {t.interaction_id: t for t in _turns(interactions)}
    chosen: dict[str, int] = {}
    for turn in turns.values():
        extends = (turn.tito or {}).get("extends")
        parent_id = extends.get("interaction_id") if isinstance(extends, dict) else None
        if isinstance(extends, dict) and isinstance(parent_id, str) and branch.get(
                parent_id) == branch[turn.interaction_id]:
            chosen[parent_id] = int(extends.get("choice") or 0)
    records = []
    for branch_id, parent in parents.items():
        members = [t for iid, t in turns.items() if branch[iid] == branch_id]
        record = _sequence(branch_id, parent, members, chosen)
        replaced = members[0].compacted_from if members else None
        record["compacted_from"] = None if replaced is None else {
            "interaction_id": replaced, "branch": branch.get(replaced)}
        records.append(record)
    return records


def _sequence(branch_id: str, parent: Any, members: list[Interaction],
              chosen: dict[str, int]) -> dict[str, Any]:
    tokens: list[int] = []
    mask: list[int] = []
    logprobs: list[float] = []
    versions: list[WeightSpanJSON] = []
    error = None
    last: Interaction | None = None
    for turn in members:
        prompt = turn.prompt_token_ids.tolist()
        if tokens and prompt[: len(tokens)] != tokens:
            error = {"interaction_id": turn.interaction_id,
                     "reason": "prompt does not extend the branch"}
            break
        last = turn
        new = prompt[len(tokens):]
        choice = turn.choices[chosen.get(turn.interaction_id, 0)]
        completion = choice.token_ids.tolist()
        versions += sequence_spans(choice, len(tokens) + len(new), len(completion))
        tokens += new + completion
        mask += [0] * len(new) + [1] * len(completion)
        sampled = choice.logprobs.tolist()
        if len(sampled) != len(completion):
            sampled = [0.0] * len(completion)
            error = error or {"interaction_id": turn.interaction_id,
                              "reason": "logprobs missing"}
        logprobs += [0.0] * len(new) + sampled
    record = {
        "branch_id": branch_id, "parent": parent,
        "interaction_ids": [t.interaction_id for t in members],
        "token_ids": tokens, "loss_mask": mask, "logprobs": logprobs,
        "weight_versions": versions, "error": error,
    }
    images = (last.tito or {}).get("images") if last is not None else None
    if images and last is not None:
        # The last turn's prompt is the sequence's prefix: its placeholders' positions
        # are the sequence's, and its request holds every image of the sample.
        record["images"] = sample_images(images, last.request)
    return record
