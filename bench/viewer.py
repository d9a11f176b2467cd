"""The /ui session page at length, in headless chromium (the tests' setup,
``tests/ui/browser.py``): time from navigation until the first turns show their
tokens, the bytes fetched and the DOM nodes rendered, for a ``--turns``-turn chat
session written into a SQLite store, against two baselines measured in the same run:
a 3-turn session on the same viewer, and the same long session on the viewer before
turns were paged (``--baseline-commit``'s app.js, which fetched the whole trajectory
and rendered every turn with its whole history).

    python bench/viewer.py [--turns 300] [--repeat 3] [--baseline-commit 1b95503]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
from array import array
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]

from seedproxy.proxy import create_app  # noqa: E402
from seedproxy.proxy import ui as ui_routes  # noqa: E402
from seedproxy.sessions import SessionRecord, open_store  # noqa: E402
from seedproxy.sessions.cursor import Cursors  # noqa: E402
from seedproxy.sessions.interaction import ChoiceRecord, Interaction  # noqa: E402
from seedproxy.settings import Settings  # noqa: E402
from tests.helpers.fake_sglang import VOCAB_BASE, Switches, create_fake_sglang  # noqa: E402
from tests.helpers.servers import ServerThread  # noqa: E402
from tests.ui.browser import chromium_driver  # noqa: E402

PROMPT_PER_TURN = 100  # prompt ids each turn adds (user message + the answer before it)
COMPLETION = 60  # completion ids per turn


def turn(k: int, upstream: str) -> Interaction:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are an agent."}]
    for j in range(k):
        messages += [{"role": "user", "content": f"observation {j}: " + "x" * 200},
                     {"role": "assistant", "content": f"action {j}"}]
    messages.append({"role": "user", "content": f"observation {k}: " + "x" * 200})
    ids = array("i", [VOCAB_BASE + (k + j) % 20 for j in range(COMPLETION)])
    return Interaction(
        interaction_id=f"i{k}", request_index=k, seeds=[k], endpoint="/v1/chat/completions",
        request={"model": "m", "messages": messages},
        response={"choices": [{"index": 0, "finish_reason": "stop",
                               "message": {"role": "assistant", "content": f"action {k}"}}]},
        prompt_token_ids=array("i", range(PROMPT_PER_TURN * (k + 1))),
        choices=[ChoiceRecord(ids, array("f", [-0.3] * COMPLETION), "stop")],
        latency_ms=1.0, upstream=upstream)


async def fill(url: str, sessions: dict[str, int], upstream: str) -> None:
    store, cursors = open_store(url), Cursors()
    for name, turns in sessions.items():
        await store.create(SessionRecord(name, name, f"key-{name}"))
        record = await store.get(name)
        assert record is not None
        for k in range(turns):  # stored once, as the proxy records a turn
            interaction = turn(k, upstream)
            link, sent = (await cursors.view(store, record)).link_for(interaction)
            await store.record(name, interaction, link=link, sent=sent)
        await store.end(name)
    await store.close()


def page_load(driver: Any, url: str, cards: int) -> dict[str, float]:
    """Navigate; wait until ``cards`` turn cards show tokens: the ms since navigation
    (an upper bound by one poll), the bytes fetched, the DOM nodes."""
    driver.get("about:blank")
    driver.get(url)
    shown = False
    while not shown:  # polled as fast as the driver answers: performance.now() when seen
        shown = driver.execute_script(
            "return document.querySelectorAll('section.interaction .completion .tok').length"
            " > 0 && document.querySelectorAll('section.interaction').length >= arguments[0]"
            " ? performance.now() : false", cards)
    return driver.execute_script(  # type: ignore[no-any-return]
        "const r = performance.getEntriesByType('resource');"
        "return {ms: arguments[0],"
        " kb: r.reduce((s, e) => s + e.encodedBodySize, 0) / 1024,"
        " requests: r.length,"
        " nodes: document.getElementsByTagName('*').length,"
        " cards: document.querySelectorAll('section.interaction').length}", shown)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--baseline-commit", default="1b95503")
    args = parser.parse_args()
    old_js = subprocess.run(
        ["git", "-C", str(ROOT), "show",
         f"{args.baseline_commit}:src/seedproxy/proxy/ui/static/app.js"],
        capture_output=True, check=True).stdout

    with tempfile.TemporaryDirectory() as tmp, \
            ServerThread(create_fake_sglang(Switches())) as fake:
        url = f"sqlite:///{tmp}/viewer.db"
        asyncio.run(fill(url, {"long": args.turns, "short": 3}, fake.url))
        settings = Settings(upstream=[fake.url], store=url)
        new = ServerThread(create_app(settings)).start()
        load = ui_routes._load_assets
        ui_routes._load_assets = lambda: {**load(), "app.js": old_js}  # the baseline's page
        try:
            old = ServerThread(create_app(settings)).start()
        finally:
            ui_routes._load_assets = load
        driver = chromium_driver(Path(tmp) / "profile")
        driver.set_script_timeout(600)  # the baseline's page blocks its main thread for long
        driver.set_page_load_timeout(600)
        cases = {
            f"paged viewer, {args.turns} turns": (new.url + "/ui#/session/long", 20),
            "paged viewer, 3 turns": (new.url + "/ui#/session/short", 3),
            f"whole-trajectory viewer, {args.turns} turns": (
                old.url + "/ui#/session/long", args.turns),
        }
        results: dict[str, list[dict[str, float]]] = {name: [] for name in cases}
        try:
            for _ in range(args.repeat):  # interleaved: machine load hits each alike
                for name, (page, cards) in cases.items():
                    results[name].append(page_load(driver, page, cards))
                    print(name, results[name][-1], file=sys.stderr, flush=True)
        finally:
            driver.quit()
            new.stop()
            old.stop()

    base = statistics.median(r["ms"] for r in results[f"paged viewer, {args.turns} turns"])
    print(f"{'page':<40} {'load ms':>9} {'ratio':>6} {'KB':>9} {'requests':>9}"
          f" {'DOM nodes':>10} {'cards':>6}")
    for name, runs in results.items():
        ms = statistics.median(r["ms"] for r in runs)
        last = runs[-1]
        print(f"{name:<40} {ms:>9.0f} {ms / base:>6.2f} {last['kb']:>9.0f}"
              f" {last['requests']:>9.0f} {last['nodes']:>10.0f} {last['cards']:>6.0f}")


if __name__ == "__main__":
    main()
