"""mini-swe-agent (PyPI ``mini-swe-agent``), its text-action agent (one fenced
``mswea_bash_command`` block per reply, its ``mini_textbased`` config) through LiteLLM's
OpenAI provider, in a process of its own, offline, through a seedproxy session: two
commands, then the submit command, against the scripted Qwen3 in token-in-token-out mode
(replayed by a second session of the same identity) and against the fake SGLang in
passthrough mode."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.fake_sglang import Switches
from tests.helpers.harness_runs import (
    Session,
    check_exported,
    check_replay,
    check_tito,
    interactions,
    open_session,
    passthrough_proxy,
    tito_proxy,
)
from tests.helpers.scripted_qwen3 import MARKER, ROUNDS, ScriptedQwen3, shell_commands
from tests.helpers.waiting import HANG_S

pytest.importorskip("minisweagent")

END = "printf 'COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\\nDONE %s\\n'"
DRIVER = """
import sys, yaml
from pathlib import Path
import minisweagent
from minisweagent.agents.default import DefaultAgent
from minisweagent.environments.local import LocalEnvironment
from minisweagent.models.litellm_textbased_model import LitellmTextbasedModel

config = yaml.safe_load((Path(minisweagent.__file__).parent / "config" /
                         "mini_textbased.yaml").read_text())
model = LitellmTextbasedModel(model_name="openai/qwen3", cost_tracking="ignore_errors",
    **{**config["model"], "model_kwargs": {**config["model"].get("model_kwargs", {}),
       "api_base": sys.argv[1], "api_key": sys.argv[2]}})
agent = DefaultAgent(model, LocalEnvironment(cwd=sys.argv[3], **config["environment"]),
                     **{**config["agent"], "step_limit": 6})
result = agent.run("Run the marker command, then submit what it printed.")
print(result.get("submission") or result)
"""


def run_mini(session: Session, scratch: Path) -> str:
    """The agent's submission."""
    for folder in (scratch / "home", scratch / "work"):
        folder.mkdir(parents=True, exist_ok=True)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(scratch / "home"),
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
        "MSWEA_GLOBAL_CONFIG_DIR": str(scratch / "home"), "MSWEA_SILENT_STARTUP": "1",
        "MSWEA_COST_TRACKING": "ignore_errors", "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }
    done = subprocess.run([sys.executable, "-c", DRIVER, session.base_url, session.api_key,
                           str(scratch / "work")], env=env, capture_output=True, text=True,
                          timeout=HANG_S)
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def test_a_text_action_task_through_token_in_token_out_is_exact_and_replays(
    start_proxy: Callable[..., str], tmp_path: Path
) -> None:
    scripted = ScriptedQwen3(shell=None, text_actions=True, end_command=END,
                             fence="mswea_bash_command")
    with tito_proxy(start_proxy, scripted) as proxy:
        first = open_session(proxy, "mini")
        assert f"DONE read {MARKER}" in run_mini(first, tmp_path)
        check_tito(proxy, first.id, scripted)
        again = open_session(proxy, "mini")
        run_mini(again, tmp_path)
        check_replay(proxy, first.id, again.id)
        check_exported(proxy, first.id, scripted)


def test_a_text_action_task_completes_in_passthrough_mode(
    start_proxy: Callable[..., str], tmp_path: Path
) -> None:
    def reply(messages: list[dict[str, Any]]) -> str:
        rounds = sum(m.get("role") == "assistant" for m in messages)
        last = str(messages[-1].get("content"))
        seen = f"read {MARKER}" if f"read {MARKER}" in last else MARKER if MARKER in last else ""
        command = (f"{END} '{seen}'" if rounds >= ROUNDS
                   else shell_commands(seen)[rounds])
        return f"A step.\n\n```mswea_bash_command\n{command}\n```"

    with passthrough_proxy(start_proxy, Switches(reply_fn=reply)) as proxy:
        session = open_session(proxy, "mini-pass")
        assert f"DONE read {MARKER}" in run_mini(session, tmp_path)
        turns = interactions(proxy, session.id)
        assert len(turns) == ROUNDS + 1 and all(t["status"] == 200 for t in turns)
