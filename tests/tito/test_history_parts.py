"""Matching a history against earlier turns reads every part and field the template
could render: an earlier message that gained a content part (an image, an unknown
part, a text part split differently) or a field it did not have is a different
message. The request then takes a full render, which answers exactly as the same
messages would in a fresh session (a 400 for an image, with no index used), and never
"extends" the earlier turn with the change left out of the prompt. Fields a client
re-sends with empty values (``refusal: null``, ``annotations: []``) and ids are not
changes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

pytest.importorskip("transformers")

from tests.conftest import Fake  # noqa: E402
from tests.helpers.images import png_url  # noqa: E402
from tests.tito.test_contract import EOT, TOKENIZER, generated, tito  # noqa: E402

HI = {"role": "user", "content": "hi"}
IMAGE = {"type": "image_url", "image_url": {"url": png_url()}}


@pytest.fixture(scope="module")
def tok() -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(TOKENIZER)


def post(base: str, session: str, messages: list[dict[str, Any]]) -> httpx.Response:
    return httpx.post(f"{base}/sessions/{session}/v1/chat/completions", timeout=60,
                      json={"model": "m", "messages": messages})


def turn_two(base: str, fake: Fake, tok: Any, session: str,
             first: dict[str, Any]) -> httpx.Response:
    """Turn one asks ``hi``; turn two re-sends it as ``first``, the reply, and more."""
    reply = list(tok.encode("Hello.", add_special_tokens=False)) + [EOT]
    fake.switches.script = [reply, [1, EOT]]
    assert post(base, session, [HI]).status_code == 200
    history = [first, {"role": "assistant", "content": "Hello."},
               {"role": "user", "content": "more"}]
    return post(base, session, history)


def state(base: str, session: str) -> tuple[int, list[dict[str, Any]]]:
    record = httpx.get(f"{base}/sessions/{session}/trajectory", timeout=60).json()
    taken = httpx.get(f"{base}/sessions/{session}", timeout=60).json()["next_index"]
    return taken, [t["lineage"] for t in record["interactions"]]


@pytest.mark.parametrize("part", [IMAGE, {"type": "thing", "thing": 1}])
def test_an_earlier_message_that_gained_a_part_is_refused_as_in_a_fresh_session(
        fake: Fake, start_proxy: Callable[..., str], tok: Any, part: dict[str, Any]) -> None:
    base = tito(start_proxy, fake)
    changed = {"role": "user", "content": [{"type": "text", "text": "hi"}, part]}
    fresh = post(base, "fresh", [changed, {"role": "assistant", "content": "Hello."},
                                 {"role": "user", "content": "more"}])
    answer = turn_two(base, fake, tok, "s", changed)
    assert (answer.status_code, fresh.status_code) == (400, 400), answer.text
    assert answer.json()["error"] == fresh.json()["error"]
    assert state(base, "s")[0] == 1  # the refused turn used no index
    assert len(generated(fake)) == 1


@pytest.mark.parametrize("changed", [
    {"role": "user", "content": [{"type": "text", "text": "h"}, {"type": "text", "text": "i"}]},
    {"role": "user", "content": "hi", "note": "a field the template may render"},
])
def test_an_earlier_message_whose_parts_or_fields_changed_is_a_new_branch(
        fake: Fake, start_proxy: Callable[..., str], tok: Any, changed: dict[str, Any]) -> None:
    base = tito(start_proxy, fake)
    answer = turn_two(base, fake, tok, "b", changed)
    assert answer.status_code == 200, answer.text
    taken, turns = state(base, "b")
    assert taken == 2
    assert turns[1]["extends"] is None  # a full render, never the old prompt extended
    assert turns[1]["forked_from"] is None  # it shares no message with turn one


@pytest.mark.parametrize("same", [
    HI,
    {"role": "user", "content": [{"type": "text", "text": "hi"}]},
    {"role": "user", "content": " hi\n"},
    {"role": "user", "content": "hi", "name": None, "refusal": None, "annotations": []},
])
def test_an_earlier_message_re_sent_the_same_way_still_extends(
        fake: Fake, start_proxy: Callable[..., str], tok: Any, same: dict[str, Any]) -> None:
    base = tito(start_proxy, fake)
    answer = turn_two(base, fake, tok, "e", same)
    assert answer.status_code == 200, answer.text
    assert state(base, "e")[1][1]["extends"] == {"interaction_id": "i0", "choice": 0}
