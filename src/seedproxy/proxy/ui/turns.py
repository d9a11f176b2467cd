"""One page of a session's turns for the viewer, each showing only what it added.

Each turn gets only the messages past the history it repeats from the turn before it
(``messages_from``: how many). The turn before is the one it extends
(token-in-token-out's ``extends``), else the previous one in trajectory order; the
repeated history is the two message lists' longest common prefix, plus the assistant
message right after it when it is that turn's answer. A turn that adds nothing past it
is shown whole. Each turn carries its ``branch`` and ``prompt`` (extended, matched or
rendered); prompt ids are left out (``prompt_tokens`` counts them). Everything else is
the trajectory's record of the turn, unchanged.
"""

from __future__ import annotations

from typing import Any

from ...sessions.branches import branch_of, is_tito
from ...sessions.codec import conversation
from ...sessions.interaction import Interaction

__all__ = ["MAX_TURNS_PAGE", "turns_page"]

MAX_TURNS_PAGE = 100


def _answers(response: Any) -> list[Any]:
    """The assistant messages a chat answer gave (one per choice)."""
    choices = response.get("choices") if isinstance(response, dict) else None
    if not isinstance(choices, list):
        return []
    return [c.get("message") for c in choices if isinstance(c, dict) and c.get("message")]


def repeated(turn: Interaction, before: Interaction | None) -> int:
    """How many leading messages of ``turn``'s request repeat ``before``'s history."""
    mine = conversation(turn.request)
    theirs = conversation(before.request) if before is not None else None
    if mine is None or theirs is None or mine[0] != theirs[0]:
        return 0
    messages, history = mine[1], theirs[1]
    shared = 0
    for a, b in zip(messages, history, strict=False):
        if a != b:
            break
        shared += 1
    if shared == len(history) and shared < len(messages):
        echo = messages[shared]
        answers = _answers(before.response) if before is not None else []
        if isinstance(echo, dict) and echo.get("role") == "assistant" and (
            not answers or any(echo.get("content") == a.get("content") for a in answers
                               if isinstance(a, dict))):
            shared += 1
    return shared if shared < len(messages) else 0


def turns_page(interactions: list[Interaction], offset: int, limit: int) -> dict[str, Any]:
    """``{total, offset, next_offset, turns}`` for ``interactions[offset:offset+limit]``
    (in trajectory order); ``next_offset`` is None on the last page."""
    page = interactions[offset:offset + limit]
    by_id = {i.interaction_id: i for i in interactions}
    branch = branch_of(interactions)[0] if is_tito(interactions) else {}
    turns = []
    for k, turn in enumerate(page, start=offset):
        extends = (turn.tito or {}).get("extends")
        parent = extends.get("interaction_id") if isinstance(extends, dict) else None
        before = by_id.get(parent) if isinstance(parent, str) else None
        if before is None and k > 0:
            before = interactions[k - 1]
        skip = repeated(turn, before)
        shown: dict[str, Any] = dict(turn.to_dict())
        shown.pop("prompt_token_ids")
        shown["prompt_tokens"] = len(turn.prompt_token_ids)
        shown["turn"] = k
        shown["messages_from"] = skip
        if skip:
            name, messages = conversation(turn.request) or ("messages", [])
            shown["request"] = {**turn.request, name: messages[skip:]}
        if branch:
            shown["branch"] = branch.get(turn.interaction_id)
        tito = turn.tito or {}
        if isinstance(tito.get("prompt"), dict):
            shown["prompt"] = tito["prompt"]
        turns.append(shown)
    end = offset + len(page)
    return {"total": len(interactions), "offset": offset,
            "next_offset": end if end < len(interactions) else None, "turns": turns}
