"""Claude Code in ``--bare`` mode through a seedproxy session to the embedded engine
(tiny random model): its real requests (system blocks, 3 tools, thinking, streaming)
go through, are answered by the engine, recorded and seeded.

A random-weight model never ends its turn, and Claude Code reports a ``max_tokens``
stop as an error, so the run ends with that report; the turn that completes with the
upstream's text is tested against the fake SGLang (``tests/capture/test_claude_code.py``).
The real SmolLM2 would end its turn, but a 1,200-token Claude Code prompt takes minutes
per request on a shared CPU.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx

from seedproxy import derive_seed
from seedproxy.engine import RunningEngine
from tests.helpers.claude_code import claude_binary, run_claude


def test_a_bare_turn_through_seedproxy_to_the_engine(
    engine: RunningEngine, start_proxy: Callable[..., str], tmp_path: Path
) -> None:
    claude = claude_binary()
    proxy = start_proxy([engine.url])
    with httpx.Client(base_url=proxy, timeout=60) as http:
        made = http.post("/sessions", json={"identity": "cc-engine"}).json()["sessions"][0]
        result = run_claude(
            claude,
            made["base_url"].removesuffix("/v1"),
            made["api_key"],
            "Say hello.",
            tmp_path,
            "--bare",
            max_output_tokens=4,
            check=False,
        )
        recorded = http.get("/sessions/cc-engine/trajectory").json()["interactions"]
    assert recorded, result
    assert [t["seed"] for t in recorded] == [
        derive_seed("cc-engine", k) for k in range(len(recorded))
    ]
    for turn in recorded:
        assert turn["endpoint"] == "/v1/messages" and turn["status"] == 200
        assert turn["request"]["stream"] is True and turn["request"]["max_tokens"] == 4
        assert {t["name"] for t in turn["request"]["tools"]} >= {"Bash"}
        assert turn["response"]["stop_reason"] == "max_tokens"
        assert len(turn["completion_token_ids"]) == 4 and turn["prompt_token_ids"]
    assert result["usage"]["output_tokens"] == 4 * len(recorded)
    assert "output token maximum" in result["result"]
