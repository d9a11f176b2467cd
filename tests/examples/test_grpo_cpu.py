"""examples/grpo_cpu.py, run twice from scratch (each run its own proxy and embedded
engine): byte-identical trajectories at every step and the same final weights, in sync
and in async mode; the sync changes what the same seed samples, every sampled token's
weight version is exported, and the recorded logprobs match the trainer's forward pass."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import orjson
import pytest

from seedproxy.client import Trajectory
from tests.helpers.procs import seedproxy_env
from tests.helpers.waiting import HANG_S

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "grpo_cpu.py"
STEPS = 2
LINE = re.compile(r"step (\d+) reward ([\d.]+) tokens (\d+) seconds ([\d.]+) "
                  r"logprob_max_abs_diff (\S+) sampled_on (step-\d+) dropped (\d+)")


def run_twice(tmp_path: Path, *extra: str) -> list[tuple[Path, list[str]]]:
    """Two runs at once, each from scratch; their folders and stdout lines."""
    outs = [tmp_path / "a", tmp_path / "b"]
    procs = [subprocess.Popen([sys.executable, str(EXAMPLE), "--steps", str(STEPS),
                               "--out", str(out), *extra], env=seedproxy_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for out in outs]
    runs = []
    for out, proc in zip(outs, procs, strict=True):
        stdout, stderr = proc.communicate(timeout=HANG_S)
        assert proc.returncode == 0, stderr.decode()[-3000:]
        runs.append((out, stdout.decode().splitlines()))
    return runs


def records(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def check_identical(runs: list[tuple[Path, list[str]]]) -> list[re.Match[str]]:
    (a, lines_a), (b, lines_b) = runs
    for step in range(STEPS):
        first = (a / "rollouts" / f"step-{step}.jsonl").read_bytes()
        assert first == (b / "rollouts" / f"step-{step}.jsonl").read_bytes(), step
        assert len(first.splitlines()) == 2 * 4  # 2 prompts, groups of 4
    assert (a / "probes.jsonl").read_bytes() == (b / "probes.jsonl").read_bytes()
    sha = [line for line in lines_a if line.startswith("weights sha256 ")]
    assert lines_a[-1] == lines_b[-1] == sha[0]
    assert re.fullmatch(r"weights sha256 [0-9a-f]{64}", lines_a[-1])
    steps = [LINE.fullmatch(line) for line in lines_a[:-1]]
    assert all(steps) and [int(m[1]) for m in steps if m] == list(range(STEPS))
    return [m for m in steps if m]


def check_versions(folder: Path, sampled_on: list[str]) -> None:
    """Every sampled token of step t's rollouts carries the version that sampled it."""
    for step, version in enumerate(sampled_on):
        for raw in records(folder / "rollouts" / f"step-{step}.jsonl"):
            trajectory = Trajectory.from_json(raw)
            versions = trajectory.token_versions()
            mask = trajectory.loss_mask or []
            assert sum(mask) == 4
            assert [v for v, m in zip(versions, mask, strict=True) if m] == [version] * 4
            assert all(v is None for v, m in zip(versions, mask, strict=True) if not m)


def test_two_runs_give_identical_trajectories_and_weights_and_the_sync_is_real(
        tmp_path: Path) -> None:
    runs = run_twice(tmp_path)
    steps = check_identical(runs)
    assert [m[6] for m in steps] == ["step-0", "step-1"]
    for m in steps:  # the engine's kernels and torch's differ only in rounding
        assert int(m[3]) == 32 and float(m[5]) < 1e-4 and int(m[7]) == 0
    folder = runs[0][0]
    check_versions(folder, ["step-0", "step-1"])
    probes = records(folder / "probes.jsonl")
    assert [p["after_step"] for p in probes] == [0, 1, 2]
    assert len({p["seed"] for p in probes}) == 1  # the same seed every time
    assert [p["versions"] for p in probes] == [["step-0"], ["step-1"], ["step-2"]]
    tokens = [p["tokens"] for p in probes]
    assert tokens[0] != tokens[1] != tokens[2]  # new weights, new tokens for that seed


def test_async_runs_are_reproducible_and_train_on_one_step_stale_rollouts(
        tmp_path: Path) -> None:
    runs = run_twice(tmp_path, "--async")
    steps = check_identical(runs)
    assert [m[6] for m in steps] == ["step-0", "step-0"]  # t+1 sampled while t trained
    check_versions(runs[0][0], ["step-0", "step-0"])


@pytest.fixture(scope="module")
def example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("grpo_cpu", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["grpo_cpu"] = module  # dataclasses resolve their module
    spec.loader.exec_module(module)
    return module


def test_tokens_staler_than_the_bound_are_dropped_and_train_nothing(
        example: ModuleType) -> None:
    import torch

    model = torch.nn.Linear(1, 1)  # stands in: no token survives, so no forward pass
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    batch = [Trajectory.from_json({
        "session_id": f"s:{k}", "identity": f"s:{k}", "reward": float(k), "style": "concat",
        "token_ids": [5, 6, 7, 8], "loss_mask": [0, 0, 1, 1], "logprobs": [0, 0, -1, -2],
        "weight_versions": [{"version": "step-1", "start": 2, "end": 4}]}) for k in range(2)]
    opts = example.Options(1, Path("."), 2, 1, 2, 0, 0.1, 0.2, 1, 1, True)
    assert example.grpo_step(model, optimizer, batch, 3, opts) == 4  # 2 versions stale > 1
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert [example.version_number(v) for v in ("step-12", None, "v2")] == [
        12, -(10**9), -(10**9)]
    assert example.reward(" 12", "12") == 1.0 and example.reward("", "12") == 0.0
    assert example.reward("13", "12") == pytest.approx((1 + 1 - 1 / 64) / 2)
