"""The OpenAI Agents SDK (PyPI ``openai-agents``), with its Chat Completions model and
its Responses model, through a seedproxy session: an agent with one function tool that
runs a shell command does a task of two calls and an answer, against the scripted Qwen3
in token-in-token-out mode (replayed by a second session of the same identity) and
against the fake SGLang in passthrough mode."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from typing import Any

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
from tests.helpers.scripted_qwen3 import MARKER, ScriptedQwen3, shell_commands
from tests.helpers.waiting import HANG_S

agents = pytest.importorskip("agents")

MODELS = ["chat", "responses"]


def run_agent(session: Session, kind: str) -> str:
    """One ``Runner.run_sync`` of a shell agent on the session; its final output."""
    from openai import AsyncOpenAI

    def run_shell(command: str) -> str:
        """Run a shell command and return what it printed."""
        done = subprocess.run(["bash", "-c", command], capture_output=True, text=True,
                              timeout=HANG_S)
        return done.stdout

    client = AsyncOpenAI(base_url=session.base_url, api_key=session.api_key, max_retries=0,
                         timeout=HANG_S)
    model: Any = (agents.OpenAIChatCompletionsModel(model="qwen3", openai_client=client)
                  if kind == "chat"
                  else agents.OpenAIResponsesModel(model="qwen3", openai_client=client))
    agent = agents.Agent(name="shell", instructions="Use run_shell to do the task.",
                         tools=[agents.function_tool(run_shell)], model=model)
    result = agents.Runner.run_sync(agent, "Run the marker command, then report it.",
                                    run_config=agents.RunConfig(tracing_disabled=True))
    return str(result.final_output)


@pytest.mark.parametrize("kind", MODELS)
def test_a_shell_task_through_token_in_token_out_is_exact_and_replays(
    kind: str, start_proxy: Callable[..., str]
) -> None:
    scripted = ScriptedQwen3(shell="run_shell")
    with tito_proxy(start_proxy, scripted) as proxy:
        first = open_session(proxy, f"agents-{kind}")
        assert run_agent(first, kind) == f"DONE read {MARKER}"
        check_tito(proxy, first.id, scripted)
        again = open_session(proxy, f"agents-{kind}")
        run_agent(again, kind)
        check_replay(proxy, first.id, again.id)
        check_exported(proxy, first.id, scripted)


@pytest.mark.parametrize("kind", MODELS)
def test_a_shell_task_completes_in_passthrough_mode(
    kind: str, start_proxy: Callable[..., str]
) -> None:
    switches = Switches(call_tool="run_shell", tool_rounds=2, stop_after=6,
                        call_arguments={"command": shell_commands("")[0]})
    with passthrough_proxy(start_proxy, switches) as proxy:
        session = open_session(proxy, f"agents-{kind}-pass")
        assert run_agent(session, kind)
        check_passthrough(proxy, session.id, "run_shell")
