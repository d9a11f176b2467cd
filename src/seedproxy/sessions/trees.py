"""A session's branches as a tree a trainer can read: links inferred, the main one named.

Inferred at export from what the harness sent (no header from it), in this order:

- ``subagent_of`` ``{interaction_id, tool_call_id}``: a text of the branch's first user
  message equals a string argument of a tool call answered earlier in another branch
  (the latest such call): the sub-agent it started (Claude Code's ``Agent``);
- ``compacted_from`` ``{interaction_id, branch, summary}``: a text of the branch's first
  user message holds the answer of an earlier turn ``summary`` (its ``<summary>`` part
  when it has one, at least ``MIN_SUMMARY`` characters; the latest such turn): the
  history that turn summarised (the turn its branch forked from, or itself when it
  continued a branch) is what this branch replaces. One the client marked
  (``x-seedproxy-compacted-from``) is kept;
- ``main``: the chain of branches joined by compactions holding the most turns (then
  sampled tokens, then the earliest first turn), sub-agents and summary requests left
  out; the export's ``chain`` is it, in order;
- ``side_request``: a one-turn branch offering no tools, neither main nor a sub-agent.

A branch continuing an earlier turn (a second continuation) started no conversation:
no link is inferred for it. Each answer is read once; the cost is the branches times
the earlier turns' texts. Texts are read in the client's protocol (chat completions,
Anthropic Messages, Responses; an unknown shape reads as nothing); the result depends
on content only, never on arrival order.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .interaction import Interaction

__all__ = ["MIN_SUMMARY", "link_branches", "prompt_counts"]

MIN_SUMMARY = 16
"""Characters: a shorter answer is not taken for a summary."""
_SUMMARY = re.compile(r"<summary>(.*?)</summary>", re.DOTALL)


def _summary_of(text: str) -> str:
    found = _SUMMARY.search(text)
    return (found.group(1) if found else text).strip()


def link_branches(records: list[dict[str, Any]], interactions: list[Interaction]
                  ) -> list[str]:
    """Add ``subagent_of``, ``compacted_from`` (inferred), ``side_request`` and
    ``main`` to each branch record; return the main chain's branch ids."""
    by_id = {i.interaction_id: i for i in interactions}
    branch_of = {iid: r["branch_id"] for r in records for iid in r["interaction_ids"]}
    parents = {r["branch_id"]: r.get("parent") for r in records}
    answered = sorted((i for i in interactions if i.interaction_id in branch_of),
                      key=lambda i: (i.request_index, i.interaction_id))
    summaries: set[str] = set()
    said = {i.interaction_id: _summary_of("".join(_texts(_answer_parts(i))).strip())
            for i in answered}
    for record in records:
        first = by_id[record["interaction_ids"][0]]
        parent = record.get("parent")
        # A branch continuing an earlier turn (its second continuation) started nothing.
        texts = [] if isinstance(parent, dict) and "choice" in parent else user_texts(first)
        earlier = [i for i in answered if (i.request_index, i.interaction_id) < (
            first.request_index, first.interaction_id)
            and branch_of[i.interaction_id] != record["branch_id"]]
        record["subagent_of"] = _caller(texts, earlier)
        if record["subagent_of"] is None and record.get("compacted_from") is None:
            record["compacted_from"] = _compacted(texts, earlier, said, branch_of, parents)
        inferred = record.get("compacted_from") or {}
        if inferred.get("summary") and inferred.get("branch") != branch_of[inferred["summary"]]:
            summaries.add(branch_of[inferred["summary"]])  # a summary request of its own
    chain = _main_chain(records, summaries)
    for record in records:
        record["main"] = record["branch_id"] in chain
        first = by_id[record["interaction_ids"][0]]
        record["side_request"] = (not record["main"] and record["subagent_of"] is None
                                  and len(record["interaction_ids"]) == 1
                                  and not (isinstance(first.request, dict)
                                           and first.request.get("tools")))
    return chain


def _caller(texts: list[str], earlier: list[Interaction]) -> dict[str, Any] | None:
    if not texts:
        return None
    wanted = set(texts)
    for turn in reversed(earlier):
        for call_id, values in tool_calls(turn):
            if wanted.intersection(values):
                return {"interaction_id": turn.interaction_id, "tool_call_id": call_id}
    return None


def _compacted(texts: list[str], earlier: list[Interaction], said: dict[str, str],
               branch_of: dict[str, str], parents: dict[str, Any]) -> dict[str, Any] | None:
    if not texts:
        return None
    for turn in reversed(earlier):
        summary = said[turn.interaction_id]
        if len(summary) < MIN_SUMMARY or not any(summary in text for text in texts):
            continue
        branch = branch_of[turn.interaction_id]
        parent = parents.get(branch) if branch == turn.interaction_id else None
        if isinstance(parent, dict) and isinstance(parent.get("branch"), str):
            return {"interaction_id": parent.get("interaction_id"),
                    "branch": parent["branch"], "summary": turn.interaction_id}
        return {"interaction_id": turn.interaction_id, "branch": branch,
                "summary": turn.interaction_id}
    return None


def _main_chain(records: list[dict[str, Any]], summaries: set[str]) -> list[str]:
    """The chains of branches joined by compactions, sub-agents and summary requests
    left out; the one with the most turns, then sampled tokens, then earliest."""
    candidates = [r for r in records if r["subagent_of"] is None
                  and (r["branch_id"] not in summaries
                       or (r.get("compacted_from") or {}).get("branch") is not None)]
    ids = {r["branch_id"] for r in candidates}
    best: tuple[int, int, int] | None = None
    chain: list[str] = []
    for place, root in enumerate(candidates):
        if (root.get("compacted_from") or {}).get("branch") in ids:
            continue
        members = [root]
        while True:
            step = next((r for r in candidates if r not in members and (
                r.get("compacted_from") or {}).get("branch") == members[-1]["branch_id"]),
                None)
            if step is None:
                break
            members.append(step)
        score = (sum(len(r["interaction_ids"]) for r in members),
                 sum(sum(r["loss_mask"]) for r in members), -place)
        if best is None or score > best:
            best, chain = score, [r["branch_id"] for r in members]
    return chain


def prompt_counts(interactions: list[Interaction]) -> dict[str, Any]:
    """How the session's token-in-token-out prompts were made: turns ``extended``,
    ``matched`` (``{total, by matcher}``), ``rendered``, and ``unknown`` (recorded
    before ``tito["prompt"]`` was)."""
    counts: dict[str, Any] = {"extended": 0, "matched": {"total": 0, "by_matcher": {}},
                              "rendered": 0, "unknown": 0}
    for turn in interactions:
        if turn.tito is None or turn.status >= 400:
            continue
        how = turn.tito.get("prompt")
        kind = how.get("kind") if isinstance(how, dict) else None
        if kind == "matched":
            counts["matched"]["total"] += 1
            by = counts["matched"]["by_matcher"]
            for name in how.get("matchers") or []:  # type: ignore[union-attr]
                by[name] = by.get(name, 0) + 1
        elif kind in ("extended", "rendered"):
            counts[kind] += 1
        else:
            counts["unknown"] += 1
    return counts


Call = tuple[str, list[str]]
"""A tool call: its id, and the string values of its arguments (top level)."""


def _texts(content: Any) -> list[str]:
    """A message content's texts: a string, or each text part's text (any type of
    text part: ``text``, ``input_text``, ``output_text``)."""
    if isinstance(content, str):
        return [content]
    if not isinstance(content, list):
        return []
    return [str(p["text"]) for p in content
            if isinstance(p, dict) and isinstance(p.get("text"), str)
            and str(p.get("type", "text")).endswith("text")]


def user_texts(interaction: Interaction) -> list[str]:
    """The texts of the request's first user message, stripped, in order."""
    request = interaction.request if isinstance(interaction.request, dict) else {}
    messages = request.get("messages")
    if messages is None:  # Responses: ``input`` is a string or items
        messages = request.get("input")
        if isinstance(messages, str):
            return [messages.strip()]
    for message in messages if isinstance(messages, list) else []:
        if isinstance(message, dict) and message.get("role") == "user":
            return [t.strip() for t in _texts(message.get("content")) if t.strip()]
    return []


def _answer_parts(interaction: Interaction) -> list[Any]:
    """The answer's content parts or items, whichever protocol."""
    response = interaction.response if isinstance(interaction.response, dict) else {}
    choices = response.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        message = choices[0].get("message") or {}
        parts: list[Any] = [{"type": "text", "text": message.get("content") or ""}]
        for call in message.get("tool_calls") or []:
            fn = call.get("function") or {}
            parts.append({"type": "function_call", "call_id": call.get("id"),
                          "arguments": fn.get("arguments")})
        return parts
    if isinstance(response.get("content"), list):  # Anthropic Messages
        return list(response["content"])
    items: list[Any] = []
    for item in response.get("output") or []:  # Responses
        if isinstance(item, dict) and item.get("type") == "message":
            items += item.get("content") or []
        else:
            items.append(item)
    return items


def tool_calls(interaction: Interaction) -> list[Call]:
    """The answer's tool calls (choice 0), each with its arguments' string values."""
    out: list[Call] = []
    for part in _answer_parts(interaction):
        if not isinstance(part, dict):
            continue
        if part.get("type") == "tool_use":
            arguments: Any = part.get("input")
            call_id = part.get("id")
        elif part.get("type") == "function_call":
            arguments, call_id = part.get("arguments"), part.get("call_id")
            if isinstance(arguments, str):
                try:
                    arguments = json.loads(arguments)
                except (ValueError, RecursionError):  # not JSON, or too deep to read
                    arguments = {"": arguments}
        else:
            continue
        values = [v.strip() for v in (arguments or {}).values()
                  if isinstance(v, str) and v.strip()] if isinstance(arguments, dict) else []
        out.append((str(call_id), values))
    return out
