"""The /ui viewer in a real headless chromium, against a proxy in front of the fake
SGLang (which detokenizes like SGLang's /detokenize), with sessions made by the SDK."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from seedproxy.client import Sample, SeedProxyClient
from tests.conftest import Fake
from tests.helpers.fake_sglang import BYTE_BASE, Switches, create_fake_sglang, detok
from tests.helpers.images import png_url
from tests.helpers.servers import ServerThread
from tests.helpers.waiting import wait_until
from tests.ui.browser import screenshot, wait

pytest.importorskip("selenium")
from selenium.webdriver.common.by import By  # noqa: E402

ADMIN = "admin-secret-key"
XSS = "<script>window.__pwned = 1</script><img src=x onerror=\"window.__pwned = 2\">"


def rollout(
    url: str,
    identity: str,
    k: int,
    *,
    turns: int = 2,
    max_tokens: int = 8,
    seeds: dict[int, int] | None = None,
    admin_key: str | None = None,
) -> list[Sample]:
    """Create a group and run a multi-turn chat in each sample with the openai SDK."""

    async def agent(sample: Sample) -> str:
        messages: list[Any] = []
        content = ""
        async with sample.async_openai(max_retries=0) as client:
            for turn in range(turns):
                messages.append({"role": "user", "content": f"step {turn}"})
                extra = {"seed": seeds[turn]} if seeds and turn in seeds else {}
                answer = await client.chat.completions.create(
                    model="default", messages=messages, max_tokens=max_tokens, **extra
                )
                content = answer.choices[0].message.content or ""
                messages.append({"role": "assistant", "content": content})
        return content

    async def go() -> list[Sample]:
        async with SeedProxyClient(url, admin_key=admin_key) as proxy:
            group = await proxy.create_group(identity, k=k)
            await group.run(agent, reward=lambda text: float(len(text.split())), end=True)
            return group.samples

    return asyncio.run(go())


def trajectory(url: str, session_id: str, key: str | None = None) -> dict[str, Any]:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    answer = httpx.get(f"{url}/sessions/{session_id}/trajectory", headers=headers, timeout=30)
    answer.raise_for_status()
    return answer.json()  # type: ignore[no-any-return]


def row_ids(driver: Any) -> list[str]:
    """The listed session ids, read in one script call (the list re-renders as it polls)."""
    return driver.execute_script(  # type: ignore[no-any-return]
        "return [...document.querySelectorAll('#sessions tr.session-row')]"
        ".map((row) => row.dataset.session)"
    )


@pytest.fixture
def fake_url() -> Iterator[str]:
    with ServerThread(create_fake_sglang(Switches())) as server:
        yield server.url


def test_the_list_shows_the_sessions_an_sdk_run_made_and_updates_live(
    driver: Any, fake_url: str, start_proxy: Callable[..., str], tmp_path: Path
) -> None:
    proxy = start_proxy([fake_url])
    made = [s.session_id for s in rollout(proxy, "task7", 3)]
    driver.get(proxy + "/ui")
    wait(driver, lambda d: row_ids(d) == made)
    states = driver.execute_script(
        "return [...document.querySelectorAll('#sessions .state')].map((e) => e.textContent)"
    )
    assert states == ["ended"] * 3
    screenshot(driver, "ui-sessions.png", tmp_path)

    # While nothing changes, the page polls with the version it shows and gets only
    # that back (``changed: false``); the table stays as it is.
    polled = ("return performance.getEntriesByType('resource')"
              ".filter((e) => e.name.includes('/sessions?') && e.name.includes('since=')).length")
    wait(driver, lambda d: d.execute_script(polled) >= 1)
    assert row_ids(driver) == made
    version = httpx.get(proxy + "/sessions").json()["version"]
    assert httpx.get(proxy + "/sessions", params={"since": version}).json() == {
        "version": version, "changed": False}

    later = rollout(proxy, "task8", 1)[0].session_id  # the open page polls: it appears
    wait(driver, lambda d: row_ids(d) == [*made, later])

    identity = driver.find_element(By.ID, "filter-identity")
    identity.send_keys("task7:1\n")
    wait(driver, lambda d: row_ids(d) == ["task7:1"])


def test_a_session_page_shows_one_token_span_per_recorded_completion_id(
    driver: Any, fake_url: str, start_proxy: Callable[..., str], tmp_path: Path
) -> None:
    proxy = start_proxy([fake_url])
    session = rollout(proxy, "task3", 1, turns=3)[0].session_id
    recorded = trajectory(proxy, session)["interactions"]
    driver.get(f"{proxy}/ui#/session/{session}")
    wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, ".completion .tok"))
    cards = driver.find_elements(By.CSS_SELECTOR, "section.interaction")
    assert len(cards) == len(recorded) == 3
    for card, interaction in zip(cards, recorded, strict=True):
        spans = card.find_elements(By.CSS_SELECTOR, ".completion .tok")
        ids = interaction["completion_token_ids"]
        assert [int(s.get_attribute("data-id")) for s in spans] == ids
        assert [s.text.strip() for s in spans] == [detok([i]).strip() for i in ids]
        first = spans[0].get_attribute("title")
        assert f"id {ids[0]}" in first and f"logprob {interaction['logprobs'][0]:.4f}" in first
        assert card.find_element(By.CSS_SELECTOR, ".seed").text == str(interaction["seed"])
    # Chat turns on the fake re-tokenise the assistant's words: the concat view marks
    # the drift where the export reports it.
    concat = httpx.get(f"{proxy}/sessions/{session}/trajectory?style=concat").json()
    drift = concat["concat_error"]
    shown = wait(driver, lambda d: d.find_elements(By.ID, "drift"))[0].text  # loads when seen
    assert f"drift at turn {drift['turn']} " in shown and f"position {drift['position']}" in shown
    screenshot(driver, "ui-session.png", tmp_path)


def test_the_diff_marks_the_first_divergence_of_two_replays(
    driver: Any, fake_url: str, start_proxy: Callable[..., str], tmp_path: Path
) -> None:
    proxy = start_proxy([fake_url])
    first = rollout(proxy, "replay", 1, turns=3)[0].session_id
    second = rollout(proxy, "replay", 1, turns=3, seeds={1: 12345})[0].session_id
    assert (first, second) == ("replay", "replay-1")
    a = [i["completion_token_ids"] for i in trajectory(proxy, first)["interactions"]]
    b = [i["completion_token_ids"] for i in trajectory(proxy, second)["interactions"]]
    assert a[0] == b[0] and a[1] != b[1]  # same seeds replay; the pinned seed diverges
    position = next(p for p, (x, y) in enumerate(zip(a[1], b[1], strict=True)) if x != y)

    driver.get(f"{proxy}/ui#/session/{first}")
    option = "#diff-with option[value='replay-1']"
    picker = wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, option))
    picker[0].click()
    marker = wait(driver, lambda d: d.find_elements(By.ID, "divergence"))[0]
    assert marker.get_attribute("data-turn") == "1"
    assert marker.get_attribute("data-position") == str(position)
    assert marker.get_attribute("data-a") == str(a[1][position])
    assert marker.get_attribute("data-b") == str(b[1][position])
    marked = driver.find_elements(By.CSS_SELECTOR, ".tok.diverge")
    assert [int(m.get_attribute("data-id")) for m in marked] == [a[1][position], b[1][position]]
    dimmed = driver.find_elements(By.CSS_SELECTOR, ".diff-col[data-side='a'] .tok.same")
    assert len(dimmed) >= len(a[0]) + position
    screenshot(driver, "ui-diff.png", tmp_path)


def test_with_an_admin_key_the_page_shows_nothing_without_it(
    driver: Any, fake_url: str, start_proxy: Callable[..., str]
) -> None:
    proxy = start_proxy([fake_url], admin_key=ADMIN)
    samples = rollout(proxy, "secret-task", 2, admin_key=ADMIN)
    assert httpx.get(proxy + "/sessions").status_code == 401

    driver.get(proxy + "/ui")
    wait(driver, lambda d: d.find_elements(By.ID, "login"))
    assert not driver.find_elements(By.ID, "sessions")
    assert "secret-task" not in driver.find_element(By.TAG_NAME, "body").text

    # A session's own key opens that session only, never the list or another session.
    driver.find_element(By.ID, "key").send_keys(samples[0].api_key + "\n")
    wait(driver, lambda d: "admin key" in d.find_element(By.ID, "login-message").text)
    driver.get(f"{proxy}/ui#/session/{samples[1].session_id}")
    wait(driver, lambda d: "does not reach" in d.find_element(By.ID, "login-message").text)
    driver.get(f"{proxy}/ui#/session/{samples[0].session_id}")
    wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, ".completion .tok"))

    driver.find_element(By.ID, "forget-key").click()
    wait(driver, lambda d: d.find_elements(By.ID, "login"))
    driver.get(proxy + "/ui#/")
    wait(driver, lambda d: d.find_elements(By.ID, "key"))[0].send_keys(ADMIN + "\n")
    wait(driver, lambda d: row_ids(d) == [s.session_id for s in samples])
    driver.execute_script("sessionStorage.clear()")


def test_a_completion_with_markup_shows_as_text(
    driver: Any, start_proxy: Callable[..., str]
) -> None:
    with ServerThread(create_fake_sglang(Switches(reply=XSS))) as fake:
        proxy = start_proxy([fake.url])
        sample = rollout(proxy, "markup", 1, turns=1, max_tokens=len(XSS))[0]
        driver.get(f"{proxy}/ui#/session/{sample.session_id}")
        wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, ".completion .tok"))
        answer = driver.find_element(By.CSS_SELECTOR, ".answer").text
        assert XSS in answer
        assert not driver.find_elements(By.CSS_SELECTOR, "#main script, #main img")
        assert driver.execute_script("return window.__pwned === undefined")
        spans = driver.find_elements(By.CSS_SELECTOR, ".completion .tok")
        assert "".join(s.get_attribute("textContent") for s in spans) == XSS


def test_ui_responses_carry_a_strict_content_security_policy(
    fake_url: str, start_proxy: Callable[..., str]
) -> None:
    proxy = start_proxy([fake_url], admin_key=ADMIN)
    for path in ("/ui", "/ui/app.js", "/ui/style.css"):
        answer = httpx.get(proxy + path)
        assert answer.status_code == 200, path
        policy = answer.headers["content-security-policy"]
        assert "default-src 'none'" in policy and "script-src 'self'" in policy
        assert "unsafe-inline" not in policy and "frame-ancestors 'none'" in policy
        assert answer.headers["x-content-type-options"] == "nosniff"
    refused = httpx.post(proxy + "/ui/api/detokenize", json={"ids": [1]})
    assert refused.status_code == 401 and refused.json()["error"]["message"]
    elsewhere = httpx.post(
        proxy + "/ui/api/detokenize",
        json={"ids": [1], "upstream": "http://169.254.169.254"},
        headers={"authorization": f"Bearer {ADMIN}"},
    )
    assert elsewhere.status_code == 400 and elsewhere.json()["error"]["param"] == "upstream"


def test_a_completion_marks_where_each_weight_version_starts(
    driver: Any, fake: Fake, start_proxy: Callable[..., str]
) -> None:
    control = fake.switches.control
    control.hold_at = 3  # the server stops after three tokens until released
    proxy = start_proxy([fake.url])
    body = {"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 6}}
    worker = threading.Thread(target=lambda: httpx.post(
        f"{proxy}/sessions/wv-1/generate", json=body, timeout=60))
    worker.start()
    wait_until(lambda: control.held == 1)
    control.version = "v2"  # as the server's /update_weight_version does, mid-generation
    control.release.set()
    worker.join(60)
    assert trajectory(proxy, "wv-1")["interactions"][0]["weight_versions"] == [
        {"version": "default", "start": 0, "end": 3}, {"version": "v2", "start": 3, "end": 6}]
    driver.get(f"{proxy}/ui#/session/wv-1")
    wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, ".completion .tok"))
    shown = driver.execute_script(
        "return [...document.querySelectorAll('.completion > span')].map((s) =>"
        " s.classList.contains('version-mark') ? 'mark:' + s.textContent : 'tok')")
    assert shown == ["mark:default", "tok", "tok", "tok", "mark:v2", "tok", "tok", "tok"]


EMOJI_REPLY = "Hi 👋🏽 and 🎉!"


def test_an_emoji_over_byte_tokens_shows_as_one_glyph(
    driver: Any, start_proxy: Callable[..., str]
) -> None:
    """Each byte token decodes alone to U+FFFD; the strip shows each character once, over
    the tokens that make it, with every id in its title."""
    with ServerThread(create_fake_sglang(Switches(reply=EMOJI_REPLY, byte_reply=True))) as fake:
        proxy = start_proxy([fake.url])
        ids = [BYTE_BASE + b for b in EMOJI_REPLY.encode()]
        sample = rollout(proxy, "emoji", 1, turns=1, max_tokens=len(ids))[0]
        assert trajectory(proxy, sample.session_id)["interactions"][0][
            "completion_token_ids"] == ids
        driver.get(f"{proxy}/ui#/session/{sample.session_id}")
        wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, ".completion .tok.glyph"))
        spans = driver.find_elements(By.CSS_SELECTOR, ".completion .tok")
        shown = [s.get_attribute("textContent") for s in spans]
        assert shown == ["H", "i", " ", "👋", "🏽", " ", "a", "n", "d", " ", "🎉", "!"]
        assert "\ufffd" not in "".join(shown)
        covered = [[int(i) for i in s.get_attribute("data-id").split(",")] for s in spans]
        assert [i for group in covered for i in group] == ids  # every token, in order, once
        assert [len(g) for g in covered if len(g) > 1] == [4, 4, 4]
        wave = spans[3].get_attribute("title")
        assert all(f"id {i}" in wave for i in covered[3])
        concat = wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#concat .tok.gen"))
        assert "".join(s.get_attribute("textContent") for s in concat) == EMOJI_REPLY


def test_a_messages_answer_shows_its_text(
    driver: Any, fake_url: str, start_proxy: Callable[..., str]
) -> None:
    anthropic = pytest.importorskip("anthropic")
    proxy = start_proxy([fake_url])
    client = anthropic.Anthropic(base_url=f"{proxy}/sessions/msg-ui", api_key="x",
                                 max_retries=0)
    message = client.messages.create(model="default", max_tokens=6,
                                     messages=[{"role": "user", "content": "Say hello."}])
    text = "".join(b.text for b in message.content if b.type == "text")
    assert text
    driver.get(f"{proxy}/ui#/session/msg-ui")
    wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, ".completion .tok"))
    answer = driver.find_element(By.CSS_SELECTOR, ".answer").get_attribute("textContent")
    assert answer == "→ answer" + text


def test_each_turn_shows_its_screenshots_as_thumbnails(
    driver: Any, fake_url: str, start_proxy: Callable[..., str]
) -> None:
    proxy = start_proxy([fake_url])
    shots = [png_url(40, 30, (200, 0, 0)), png_url(64, 48, (0, 0, 200))]
    messages: list[dict[str, Any]] = []
    for turn, shot in enumerate(shots):
        messages.append({"role": "user", "content": [
            {"type": "text", "text": f"step {turn}"},
            {"type": "image_url", "image_url": {"url": shot}}]})
        answer = httpx.post(f"{proxy}/sessions/shots-ui/v1/chat/completions", timeout=30,
                            json={"model": "m", "max_tokens": 4, "messages": messages})
        assert answer.status_code == 200, answer.text
        messages.append(answer.json()["choices"][0]["message"])
    driver.get(f"{proxy}/ui#/session/shots-ui")
    wait(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, ".interaction img.thumb")) == 2)
    # each turn shows the image it added (the first turn's is not repeated on the second),
    # loaded under the page's policy: data: URLs only
    loaded = driver.execute_script(
        "return [...document.querySelectorAll('.interaction')].map((card) => "
        "[...card.querySelectorAll('img.thumb')].map((i) => [i.src, i.naturalWidth]))")
    assert loaded == [[[shots[0], 40]], [[shots[1], 64]]]
