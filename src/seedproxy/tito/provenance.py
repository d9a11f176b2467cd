"""Why a turn's prompt was rendered in full: the first message that differs, and how.

A rendered turn's ``tito["prompt"]`` is ``{"kind": "rendered", "reason": {"message",
"what"}}``: ``message`` is the index (in the request) of the first message that no
recorded turn continues, or None when the messages are not the cause. It is read
against the recorded turn sharing the longest message prefix (the one ``forked_from``
names), so it costs what that comparison cost already.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from .facets import differences, entry_key

__all__ = ["rendered_reason"]


def rendered_reason(sent: list[dict[str, Any]], entries: list[str], context: str,
                    matchers: Collection[str], best: dict[str, Any] | None,
                    common: int) -> dict[str, Any]:
    """The reason for a full render of ``sent`` (its ``entries``), against ``best`` (the
    ``tito`` of the recorded turn sharing the longest prefix, ``common`` messages)."""
    if best is None:
        return {"message": None, "what": "first turn"}
    earlier: list[str] = best.get("messages") or []
    if common == 0:
        if len(earlier) > 1 and len(entries) > 1 and entry_key(earlier[1]) == entry_key(
                entries[1]):  # only the first message differs from the latest turn's
            return {"message": 0, "what": f"the {sent[0].get('role')} message changed"}
        return {"message": 0, "what": "a new conversation: its first message opens no "
                                      "recorded turn"}
    if best.get("context") != context and common >= min(len(earlier), len(entries)):
        return {"message": None, "what": "the tools or template options changed"}
    if common < len(earlier) and common < len(entries):
        return {"message": common, "what": _changed(sent[common], earlier[common],
                                                     entries[common], matchers)}
    if common == len(entries) < len(earlier):
        return {"message": common, "what": "the history stops inside a recorded turn's "
                                           "(later messages left out)"}
    if common == len(earlier) < len(entries):
        role = sent[common].get("role")
        if role != "assistant":
            return {"message": common, "what": f"a {role} message where the recorded "
                                               "turn's reply comes"}
        for reply in best.get("replies") or []:
            facets = reply.get("facets")
            recorded = f"{reply.get('key')}|{facets}" if facets else str(reply.get("key"))
            if differences(recorded, entries[common]) is not None:
                return {"message": common, "what": _changed(
                    sent[common], recorded, entries[common], matchers)}
        return {"message": common, "what": "the assistant message is not a reply sampled "
                                           "for the turn before it"}
    return {"message": None, "what": "the same messages as a recorded turn (a request "
                                     "sent again)"}


def _changed(message: dict[str, Any], recorded: str, sent: str,
             matchers: Collection[str]) -> str:
    role = message.get("role")
    found = differences(recorded, sent)
    if found is None:
        return f"the {role} message changed"
    off = sorted(set(found) - set(matchers))
    return f"the {role} message differs by {', '.join(off)} (a matcher turned off)"
