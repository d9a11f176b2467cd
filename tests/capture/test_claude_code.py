"""Claude Code itself, offline in print mode, through a seedproxy session to the fake
SGLang: a plain turn, and a Bash tool_use -> tool_result round trip, recorded and seeded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from seedproxy import derive_seed
from tests.conftest import Fake
from tests.helpers.claude_code import claude_binary, run_claude


@pytest.fixture
def claude() -> Path:
    return claude_binary()


def session(http: httpx.Client, identity: str) -> tuple[str, str]:
    made = http.post("/sessions", json={"identity": identity}).json()["sessions"][0]
    return str(made["base_url"]).removesuffix("/v1"), str(made["api_key"])


def turns(http: httpx.Client, session_id: str) -> list[dict[str, Any]]:
    interactions: list[dict[str, Any]] = http.get(f"/sessions/{session_id}/trajectory").json()[
        "interactions"
    ]
    return interactions


def text_of(message: dict[str, Any]) -> str:
    return "".join(b["text"] for b in message["content"] if b["type"] == "text")


def test_a_turn_completes_with_the_upstreams_text(
    claude: Path, fake: Fake, http: httpx.Client, tmp_path: Path
) -> None:
    fake.switches.answer_tools = False
    fake.switches.stop_after = 6
    base, key = session(http, "cc-text")
    result = run_claude(claude, base, key, "say something", tmp_path)
    assert result["is_error"] is False and result["subtype"] == "success"
    recorded = turns(http, "cc-text")
    main = [t for t in recorded if t["request"].get("tools")]
    assert main, recorded
    assert result["result"] == text_of(main[-1]["response"])
    assert [t["seed"] for t in recorded] == [
        derive_seed("cc-text", k) for k in range(len(recorded))
    ]
    assert all(t["endpoint"] == "/v1/messages" and t["status"] == 200 for t in recorded)


def test_a_bash_tool_round_trip_completes(
    claude: Path, fake: Fake, http: httpx.Client, tmp_path: Path
) -> None:
    fake.switches.call_tool = "Bash"
    fake.switches.call_arguments = {
        "command": "echo seedproxy-$((6*7))",
        "description": "Print a marker",
    }
    fake.switches.stop_after = 6
    base, key = session(http, "cc-bash")
    result = run_claude(
        claude, base, key, "run the marker command", tmp_path, "--allowedTools", "Bash"
    )
    assert result["is_error"] is False, result
    recorded = [t for t in turns(http, "cc-bash") if t["request"].get("tools")]
    first, second = recorded[0], recorded[-1]
    use = first["response"]["content"][-1]
    assert first["response"]["stop_reason"] == "tool_use" and use["name"] == "Bash"
    results = [
        b
        for m in second["request"]["messages"]
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    ]
    assert results and results[-1]["tool_use_id"] == use["id"]
    assert "seedproxy-42" in str(results[-1]["content"])
    assert result["result"] == text_of(second["response"])
    every = turns(http, "cc-bash")
    assert [t["seed"] for t in every] == [derive_seed("cc-bash", k) for k in range(len(every))]
