"""Claude Code in ``--bare`` mode through a seedproxy session to the embedded engine
serving the real SmolLM2 (slow): the turn completes with the engine's text, recorded
and seeded. (A random-weight model never ends its turn, and Claude Code treats a
``max_tokens`` stop as an error.)"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from seedproxy import derive_seed
from seedproxy.engine import RunningEngine, load_model, start_engine_thread
from tests.helpers.claude_code import claude_binary, run_claude

pytestmark = [pytest.mark.engine, pytest.mark.slow]


@pytest.fixture(scope="module")
def smollm2() -> Iterator[RunningEngine]:
    running = start_engine_thread(load_model(None))
    yield running
    running.stop()


def test_a_bare_turn_through_seedproxy_to_the_engine(
    smollm2: RunningEngine, start_proxy: Callable[..., str], tmp_path: Path
) -> None:
    claude = claude_binary()
    proxy = start_proxy([smollm2.url])
    with httpx.Client(base_url=proxy, timeout=60) as http:
        made = http.post("/sessions", json={"identity": "cc-engine"}).json()["sessions"][0]
        result = run_claude(claude, made["base_url"].removesuffix("/v1"), made["api_key"],
                            "Say hello.", tmp_path, "--bare", max_output_tokens=512)
        recorded = http.get("/sessions/cc-engine/trajectory").json()["interactions"]
    assert result["is_error"] is False, result
    assert recorded and all(t["endpoint"] == "/v1/messages" for t in recorded)
    assert [t["seed"] for t in recorded] == [derive_seed("cc-engine", k) for k in range(len(recorded))]
    last = recorded[-1]
    text = "".join(b["text"] for b in last["response"]["content"] if b["type"] == "text")
    assert result["result"] == text.strip() or result["result"] == text
    assert last["completion_token_ids"] and last["response"]["stop_reason"] == "end_turn"
