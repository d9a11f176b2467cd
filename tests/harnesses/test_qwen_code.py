"""qwen-code (npm ``@qwen-code/qwen-code``), offline, through a seedproxy session over
``/v1/chat/completions`` (its OpenAI auth with a custom base URL): a task of two
``run_shell_command`` calls and an answer, against the scripted Qwen3 in
token-in-token-out mode, replayed by a second session of the same identity, and against
the fake SGLang in passthrough mode."""

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

SHELL = "run_shell_command"
TASK = "Run the marker command, then report what it printed."


@pytest.fixture(scope="module")
def qwen() -> Path:
    return harness_binary("qwen")


def run_qwen(binary: Path, session: Session, scratch: Path) -> str:
    """``qwen --yolo TASK`` with OpenAI auth at the session; its stdout."""
    home, work = scratch / "home", scratch / "work"
    (home / ".qwen").mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    settings = {
        "security": {"auth": {"selectedType": "openai"}},
        "telemetry": {"enabled": False},
        "privacy": {"usageStatisticsEnabled": False},
        "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
    }
    (home / ".qwen" / "settings.json").write_text(json.dumps(settings))
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
        "OPENAI_API_KEY": session.api_key, "OPENAI_BASE_URL": session.base_url,
        "OPENAI_MODEL": "qwen3", "QWEN_CODE_NO_RELAUNCH": "1", "NO_BROWSER": "1",
    }
    done = subprocess.run([str(binary), "--yolo", "-m", "qwen3", TASK], cwd=work, env=env,
                          capture_output=True, text=True, timeout=HANG_S,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def test_a_shell_task_through_token_in_token_out_is_exact_and_replays(
    qwen: Path, start_proxy: Callable[..., str], tmp_path: Path
) -> None:
    scripted = ScriptedQwen3(shell=SHELL)
    with tito_proxy(start_proxy, scripted) as proxy:
        first = open_session(proxy, "qwen")
        out = run_qwen(qwen, first, tmp_path / "one")
        assert f"DONE read {MARKER}" in out, out
        check_tito(proxy, first.id, scripted, shell=SHELL)
        again = open_session(proxy, "qwen")
        run_qwen(qwen, again, tmp_path / "one")
        check_replay(proxy, first.id, again.id)
        check_exported(proxy, first.id, scripted)


def test_a_shell_task_completes_in_passthrough_mode(
    qwen: Path, start_proxy: Callable[..., str], tmp_path: Path
) -> None:
    switches = Switches(call_tool=SHELL, tool_rounds=2, stop_after=6,
                        call_arguments={"command": shell_commands("")[0]})
    with passthrough_proxy(start_proxy, switches) as proxy:
        session = open_session(proxy, "qwen-pass")
        run_qwen(qwen, session, tmp_path)
        check_passthrough(proxy, session.id, SHELL)
