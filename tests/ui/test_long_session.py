"""The /ui viewer on a 300-turn session written straight into a SQLite store: each
turn shows only the messages it added, and the page fetches and renders a bounded
number of turns until more scroll into view. Counted in requests and DOM nodes,
never timed."""

from __future__ import annotations

import asyncio
from array import array
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from seedproxy.sessions import SessionRecord, open_store
from seedproxy.sessions.cursor import Cursors
from seedproxy.sessions.interaction import ChoiceRecord, Interaction
from tests.helpers.fake_sglang import VOCAB_BASE, Switches, create_fake_sglang, detok
from tests.helpers.servers import ServerThread
from tests.ui.browser import wait

pytest.importorskip("selenium")
from selenium.webdriver.common.by import By  # noqa: E402

TURNS = 300
PAGE = 20  # app.js's TURNS_PAGE
SYSTEM = {"role": "system", "content": "You are terse."}


def user(k: int) -> dict[str, Any]:
    return {"role": "user", "content": f"step {k} <u>under</u>"}


def answer(k: int) -> dict[str, Any]:
    return {"role": "assistant", "content": f"answer {k}"}


def history(k: int) -> list[dict[str, Any]]:
    """Turn k's request: the system prompt, then k earlier exchanges, then step k."""
    out = [SYSTEM]
    for j in range(k):
        out += [user(j), answer(j)]
    return [*out, user(k)]


def completion(k: int) -> array[int]:
    return array("i", [VOCAB_BASE + (k + j) % 7 for j in range(3)])


def prompt(k: int) -> array[int]:
    """Turn k's prompt: turn k-1's prompt and completion, then 10 ids of its own."""
    out = array("i")
    for j in range(k + 1):
        out.extend(range(97, 107))
        if j < k:
            out.extend(completion(j))
    return out


def turn(k: int, upstream: str) -> Interaction:
    ids = completion(k)
    return Interaction(
        interaction_id=f"i{k}", request_index=k, seeds=[1000 + k],
        endpoint="/v1/chat/completions",
        request={"model": "m", "messages": history(k)},
        response={"choices": [{"index": 0, "message": answer(k), "finish_reason": "stop"}]},
        prompt_token_ids=prompt(k),
        choices=[ChoiceRecord(ids, array("f", [-0.5] * 3), "stop")],
        latency_ms=1.0, upstream=upstream,
    )


@pytest.fixture
def long_proxy(tmp_path: Path, start_proxy: Callable[..., str]) -> Iterator[str]:
    """A proxy on a SQLite store holding one ended 300-turn session, ``long``."""
    with ServerThread(create_fake_sglang(Switches())) as fake:
        url = f"sqlite:///{tmp_path / 'long.db'}"

        async def fill() -> None:
            store, cursors = open_store(url), Cursors()
            assert await store.create(SessionRecord("long", "long", "key-long"))
            record = await store.get("long")
            assert record is not None
            view = cursors.keep(record)
            for k in range(TURNS):  # stored once, as the proxy records a turn
                interaction = turn(k, fake.url)
                link, sent = view.link_for(interaction)
                assert (link is None) == (k == 0)
                view.take(await store.record("long", interaction, link=link, sent=sent,
                                             after=view.seq))
            await store.end("long")
            await store.close()

        asyncio.run(fill())
        yield start_proxy([fake.url], store=url)


def fetched(driver: Any, part: str) -> int:
    return driver.execute_script(  # type: ignore[no-any-return]
        "return performance.getEntriesByType('resource')"
        ".filter((e) => e.name.includes(arguments[0])).length", part)


def shown_turns(driver: Any) -> list[dict[str, Any]]:
    """Each rendered turn card: its turn, its 'earlier' note and its added messages."""
    return driver.execute_script(  # type: ignore[no-any-return]
        "return [...document.querySelectorAll('section.interaction')].map((card) => ({"
        " turn: Number(card.dataset.turn),"
        " earlier: (card.querySelector('.earlier') || {}).textContent || null,"
        " added: [...card.querySelectorAll('.msg.added')].map((m) => m.textContent)}))")


def test_a_long_session_page_shows_a_page_of_turns_each_with_what_it_added(
    driver: Any, long_proxy: str
) -> None:
    driver.get(f"{long_proxy}/ui#/session/long")
    wait(driver, lambda d: len(shown_turns(d)) == PAGE)
    first = shown_turns(driver)
    assert first[0] == {"turn": 0, "earlier": None,
                        "added": ["system" + SYSTEM["content"], "user" + user(0)["content"]]}
    for k, card in enumerate(first[1:], start=1):  # the history again is not shown
        assert card == {"turn": k, "earlier": f"… {2 * k + 1} earlier messages",
                        "added": ["user" + user(k)["content"]]}
    assert not driver.find_elements(By.CSS_SELECTOR, "#main u")  # markup stays text
    # One page of turns fetched; neither the whole trajectory nor its concat view.
    assert fetched(driver, "/turns?") == 1
    assert fetched(driver, "/trajectory") == 0

    spans = driver.find_elements(By.CSS_SELECTOR, ".completion .tok")
    assert len(spans) == 3 * PAGE
    assert [s.text.strip() for s in spans[:3]] == [
        detok([VOCAB_BASE + j]).strip() for j in range(3)]

    # Scrolling to the list's end brings the next page, and only it.
    driver.execute_script("document.getElementById('turns-more').scrollIntoView()")
    wait(driver, lambda d: len(shown_turns(d)) == 2 * PAGE)
    assert fetched(driver, "/turns?") == 2
    assert [c["turn"] for c in shown_turns(driver)] == list(range(2 * PAGE))
    assert fetched(driver, "/trajectory") == 0

    # Once every turn is in, the concat view loads when seen, 2,000 tokens at a time.
    while len(shown_turns(driver)) < TURNS:
        count = len(shown_turns(driver))
        driver.execute_script("document.getElementById('turns-more').scrollIntoView()")
        wait(driver, lambda d, count=count: len(shown_turns(d)) > count)
    assert fetched(driver, "/turns?") == TURNS // PAGE
    driver.execute_script("document.getElementById('concat').scrollIntoView()")
    strip = "#concat .tok"
    wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, strip))
    total = 13 * TURNS  # 3,900: two steps
    assert len(driver.find_elements(By.CSS_SELECTOR, strip)) == 2000
    driver.execute_script("document.getElementById('concat-more').scrollIntoView()")
    wait(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, strip)) == total)
    gen = driver.execute_script("return [...document.querySelectorAll('#concat .tok.gen')]"
                                ".map((t) => Number(t.dataset.id))")
    assert gen == [i for k in range(TURNS) for i in completion(k)]


def test_the_turns_route_pages_without_the_history(long_proxy: str) -> None:
    route = f"{long_proxy}/ui/api/sessions/long/turns"
    tail = httpx.get(route, params={"offset": TURNS - 5, "limit": 100}).json()
    assert (tail["total"], tail["offset"], tail["next_offset"]) == (TURNS, TURNS - 5, None)
    assert [t["turn"] for t in tail["turns"]] == list(range(TURNS - 5, TURNS))
    last = tail["turns"][-1]
    assert last["request"] == {"model": "m", "messages": [user(TURNS - 1)]}
    assert last["messages_from"] == 2 * (TURNS - 1) + 1
    assert last["prompt_tokens"] == 13 * TURNS - 3 and "prompt_token_ids" not in last
    whole = httpx.get(f"{long_proxy}/sessions/long/trajectory").json()["interactions"][-1]
    for field in ("interaction_id", "seed", "completion_token_ids", "logprobs", "response"):
        assert last[field] == whole[field]
    head = httpx.get(route, params={"limit": 3}).json()
    assert head["next_offset"] == 3 and head["turns"][0]["messages_from"] == 0
    assert head["turns"][0]["request"]["messages"] == [SYSTEM, user(0)]

    for params in ({"limit": 0}, {"limit": 101}, {"offset": -1}):
        refused = httpx.get(route, params=params)
        assert refused.status_code == 400, params
        assert refused.json()["error"]["type"] == "invalid_request_error"
    missing = httpx.get(f"{long_proxy}/ui/api/sessions/nope/turns")
    assert missing.status_code == 404 and missing.json()["error"]["message"]
