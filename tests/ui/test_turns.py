"""Which messages a turn added (``proxy/ui``): the history it repeats from the
turn it extends, pinned on small conversations."""

from __future__ import annotations

from array import array
from typing import Any

from seedproxy.proxy.ui import turns_page
from seedproxy.sessions.interaction import ChoiceRecord, Interaction


def said(role: str, content: str) -> dict[str, Any]:
    return {"role": role, "content": content}


def chat(iid: str, k: int, messages: list[dict[str, Any]], reply: str,
         extends: str | None = None) -> Interaction:
    return Interaction(
        interaction_id=iid, request_index=k, seeds=[k], endpoint="/v1/chat/completions",
        request={"messages": messages},
        response={"choices": [{"message": said("assistant", reply)}]},
        prompt_token_ids=array("i", range(k + 1)), choices=[ChoiceRecord(array("i", [k]))],
        tito={"extends": {"interaction_id": extends, "choice": 0}} if extends else None)


def added(interactions: list[Interaction]) -> list[tuple[int, list[str]]]:
    return [(t["messages_from"], [m["content"] for m in t["request"]["messages"]])
            for t in turns_page(interactions, 0, 100)["turns"]]


def test_a_turn_repeating_the_history_and_the_answer_adds_only_what_follows() -> None:
    a = [said("user", "q0")]
    b = [*a, said("assistant", "r0"), said("user", "q1")]
    c = [*b, said("assistant", "r1"), said("tool", "t1"), said("user", "q2")]
    assert added([chat("a", 0, a, "r0"), chat("b", 1, b, "r1"), chat("c", 2, c, "r2")]) == [
        (0, ["q0"]), (2, ["q1"]), (4, ["t1", "q2"])]


def test_an_edited_answer_and_a_rewritten_history_are_shown() -> None:
    a = [said("user", "q0")]
    edited = [*a, said("assistant", "r0, edited"), said("user", "q1")]
    summary = [said("user", "summary of q0"), said("user", "q2")]
    assert added([chat("a", 0, a, "r0"), chat("b", 1, edited, "r1"),
                  chat("c", 2, summary, "r2")]) == [
        (0, ["q0"]), (1, ["r0, edited", "q1"]), (0, ["summary of q0", "q2"])]


def test_a_turn_is_compared_with_the_turn_it_extends_not_the_one_before() -> None:
    root = [said("user", "q0")]
    left = [*root, said("assistant", "r0"), said("user", "left")]
    right = [*root, said("assistant", "r0"), said("user", "right")]
    deeper = [*left, said("assistant", "r1"), said("user", "deeper")]
    page = [chat("a", 0, root, "r0"), chat("b", 1, left, "r1", "a"),
            chat("c", 2, right, "r2", "a"), chat("d", 3, deeper, "r3", "b")]
    assert added(page) == [(0, ["q0"]), (2, ["left"]), (2, ["right"]), (4, ["deeper"])]


def test_pages_cover_every_turn_once_in_order() -> None:
    turns = [chat(f"i{k}", k, [said("user", f"q{k}")], "r") for k in range(7)]
    seen, offset = [], 0
    while offset is not None:
        page = turns_page(turns, offset, 3)
        seen += [t["turn"] for t in page["turns"]]
        offset = page["next_offset"]
    assert seen == list(range(7))


def test_a_fresh_request_repeating_an_earlier_message_is_shown_whole() -> None:
    hi = [said("user", "hi")]
    assert added([chat("a", 0, hi, "r0"), chat("b", 1, hi, "r1")]) == [
        (0, ["hi"]), (0, ["hi"])]
    echo = [said("user", "q0"), said("assistant", "r0")]
    assert added([chat("a", 0, [said("user", "q0")], "r0"), chat("b", 1, echo, "r1")]) == [
        (0, ["q0"]), (0, ["q0", "r0"])]


def test_a_turn_carries_how_its_prompt_was_made() -> None:
    turn = chat("a", 0, [said("user", "q0")], "r0")
    turn.tito = {"prompt": {"kind": "rendered", "reason": {"message": None,
                                                           "what": "first turn"}}}
    (shown,) = turns_page([turn], 0, 10)["turns"]
    assert shown["prompt"] == {"kind": "rendered",
                               "reason": {"message": None, "what": "first turn"}}
