"""opencode (npm ``opencode-ai``), offline, through a seedproxy session over
``/v1/chat/completions`` (its OpenAI-compatible provider): a task of two ``bash`` calls
and an answer, against the scripted Qwen3 in token-in-token-out mode (its title
request, beside the main loop, is a side turn), replayed by a second session of the
same identity with content-keyed seeds, and against the fake SGLang in passthrough mode."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers.fake_sglang import Switches
from tests.helpers.harness_runs import (
    Session,
    check_exported,
    check_passthrough,
    check_replay,
    check_tito,
    open_session,
    passthrough_proxy,
    tito_proxy,
)
from tests.helpers.npm_harness import harness_binary
from tests.helpers.scripted_qwen3 import MARKER, ScriptedQwen3, shell_commands
from tests.helpers.waiting import HANG_S

TASK = "Run the marker command, then report what it printed."


@pytest.fixture(scope="module")
def opencode() -> Path:
    return harness_binary("opencode")


def run_opencode(binary: Path, session: Session, scratch: Path) -> str:
    """``opencode run TASK`` with a provider named ``seed`` at the session; its stdout."""
    home, work = scratch / "home", scratch / "work"
    for folder in (home, work):
        folder.mkdir(parents=True, exist_ok=True)
    config = {
        "$schema": "https://opencode.ai/config.json",
        "autoupdate": False, "share": "disabled",
        "provider": {"seed": {
            "npm": "@ai-sdk/openai-compatible", "name": "seedproxy",
            "options": {"baseURL": session.base_url, "apiKey": session.api_key},
            "models": {"qwen3": {"name": "Qwen3", "tool_call": True}},
        }},
        "model": "seed/qwen3", "small_model": "seed/qwen3",
    }
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"), "XDG_DATA_HOME": str(home / ".local"),
        "XDG_CACHE_HOME": str(home / ".cache"), "XDG_STATE_HOME": str(home / ".state"),
        "OPENCODE_CONFIG_CONTENT": json.dumps(config),
        "OPENCODE_DISABLE_AUTOUPDATE": "1", "OPENCODE_DISABLE_MODELS_FETCH": "1",
        "OPENCODE_DISABLE_LSP_DOWNLOAD": "1", "OPENCODE_DISABLE_SHARE": "1",
        "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1", "OPENCODE_DISABLE_CLAUDE_CODE": "1",
        "OPENCODE_PERMISSION": json.dumps({"bash": "allow"}),
    }
    done = subprocess.run([str(binary), "run", "--model", "seed/qwen3", TASK], cwd=work,
                          env=env, capture_output=True, text=True, timeout=HANG_S)
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def test_a_bash_task_through_token_in_token_out_is_exact_and_replays(
    opencode: Path, start_proxy: Callable[..., str], tmp_path: Path
) -> None:
    # opencode's title request runs beside its main loop, so their arrival order (and
    # with it an arrival index) may differ in a replay: seeds are keyed by content.
    scripted = ScriptedQwen3(shell="bash")
    with tito_proxy(start_proxy, scripted, index_by="content") as proxy:
        first = open_session(proxy, "oc")
        out = run_opencode(opencode, first, tmp_path / "one")
        assert f"DONE read {MARKER}" in out, out
        check_tito(proxy, first.id, scripted, shell="bash")
        again = open_session(proxy, "oc")
        run_opencode(opencode, again, tmp_path / "one")
        check_replay(proxy, first.id, again.id, by_arrival=False)
        check_exported(proxy, first.id, scripted)


def test_a_bash_task_completes_in_passthrough_mode(
    opencode: Path, start_proxy: Callable[..., str], tmp_path: Path
) -> None:
    switches = Switches(call_tool="bash", tool_rounds=2, stop_after=6,
                        call_arguments={"command": shell_commands("")[0],
                                        "description": "Print the marker"})
    with passthrough_proxy(start_proxy, switches) as proxy:
        session = open_session(proxy, "oc-pass")
        run_opencode(opencode, session, tmp_path)
        check_passthrough(proxy, session.id, "bash")
