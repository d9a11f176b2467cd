"""The viewer shows what the record knows of a token-in-token-out rollout's shape: every
branch's exact sequence in the concat view (not only the first), each with its links,
and on each turn card its branch, a compaction and a replay."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

pytest.importorskip("transformers")
pytest.importorskip("selenium")

from selenium.webdriver.common.by import By  # noqa: E402

from seedproxy.engine.model import default_gguf_path, gguf_tokenizer_dir  # noqa: E402
from tests.conftest import Fake  # noqa: E402
from tests.ui.browser import wait  # noqa: E402

TEMPLATE = str(Path(__file__).parents[1] / "helpers" / "qwen3_style.jinja")
TOKENIZER = str(gguf_tokenizer_dir(default_gguf_path()))
EOT = 2  # <|im_end|> in SmolLM2's vocabulary


def encode(text: str) -> list[int]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(TOKENIZER)
    return list(tok.encode(text, add_special_tokens=False)) + [EOT]


def compacting(base: str, session: str) -> None:
    """Two turns, then a compaction (its history replaced by a summary, marked with the
    turn it replaces), then a turn extending the summary: two branches."""
    client = openai.OpenAI(base_url=f"{base}/sessions/{session}/v1", api_key="x",
                           max_retries=0)
    system = {"role": "system", "content": "You are terse."}
    messages: list[Any] = [system, {"role": "user", "content": "Start."}]
    for turn in range(4):
        headers = {}
        if turn == 2:
            messages = [system, {"role": "user", "content": "Summary so far. Go on."}]
            headers = {"x-seedproxy-compacted-from": "1"}
        answer = client.chat.completions.create(model="m", messages=messages, max_tokens=8,
                                                extra_headers=headers)
        messages += [{"role": "assistant", "content": answer.choices[0].message.content},
                     {"role": "user", "content": f"Step {turn + 1}."}]


def shown(driver: Any, script: str) -> Any:
    return driver.execute_script(script)


def test_every_branch_and_its_links_are_shown_and_cards_mark_branch_compaction_replay(
        driver: Any, fake: Fake, start_proxy: Callable[..., str]) -> None:
    base = start_proxy([fake.url], token_in_token_out=True, tokenizer=TOKENIZER,
                       chat_template=TEMPLATE)
    fake.switches.script = [encode(f"Reply {t}.") for t in range(4)]
    compacting(base, "tree")
    concat = httpx.get(f"{base}/sessions/tree/trajectory", params={"style": "concat"},
                       timeout=60).json()
    branches = concat["branches"]
    assert [b["branch_id"] for b in branches] == ["i0", "i2"]

    driver.get(f"{base}/ui#/session/tree")
    wait(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, "section.interaction")) == 4)
    marks = shown(driver, "return [...document.querySelectorAll('section.interaction')]"
                          ".map((c) => [...c.querySelectorAll('.mark')].map((m) => m.textContent))")
    assert [m[0] for m in marks] == ["branch i0", "branch i0", "branch i2", "branch i2"]
    assert [[m for m in card if m.startswith("compacts")] for card in marks] == [
        [], [], ["compacts i1"], []]

    driver.execute_script("document.getElementById('concat').scrollIntoView()")
    heads = wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#concat .branch-head"))
    assert [h.get_attribute("data-branch") for h in heads] == ["i0", "i2"]
    assert "compacted from branch i0 at i1" in heads[1].text
    # Each branch's strip holds exactly that branch's sequence, sampled tokens marked.
    for k, branch in enumerate(branches):
        strip = f"#concat .tokens[data-part='{k}']"
        more = f"{strip} .concat-more"
        wait(driver, lambda d, more=more: d.find_element(By.CSS_SELECTOR, more)
             .get_attribute("textContent") == "")
        ids = shown(driver, f"return [...document.querySelectorAll(\"{strip} .tok\")]"
                            ".map((t) => t.dataset.id)")
        gen = shown(driver, f"return [...document.querySelectorAll(\"{strip} .tok.gen\")]"
                            ".map((t) => t.dataset.id)")
        assert ",".join(ids) == ",".join(map(str, branch["token_ids"]))
        assert ",".join(gen) == ",".join(
            str(t) for t, m in zip(branch["token_ids"], branch["loss_mask"], strict=True) if m)

    # A resumed session answers from the record: its cards say so.
    httpx.post(f"{base}/sessions", json={"resume": "tree"}, timeout=30).raise_for_status()
    compacting(base, "tree-1")
    # A fresh page: a change of the hash alone leaves the first session's four cards in
    # place until the new ones render, and the wait below could count those.
    driver.get("about:blank")
    driver.get(f"{base}/ui#/session/tree-1")
    wait(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, "section.interaction")) == 4)
    replayed = shown(driver, "return [...document.querySelectorAll('section.interaction')]"
                             ".map((c) => !!c.querySelector('.mark-replayed'))")
    assert replayed == [True, True, True, True]
