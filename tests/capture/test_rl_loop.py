"""examples/rl_loop.py, run twice against a fresh proxy and a fresh upstream each time,
exports files that differ only in the clock fields the README names: each interaction's
``latency_ms`` and its response's ``created``."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from tests.helpers.fake_sglang import Switches, create_fake_sglang
from tests.helpers.procs import seedproxy_env
from tests.helpers.servers import ServerThread

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "rl_loop.py"


CLOCKS = ("latency_ms", "response.created")
"""The fields of an interaction that may differ between two runs (the README's list)."""


def without_clocks(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` with each interaction's ``CLOCKS`` taken out (key order kept)."""
    turns = []
    for turn in record["interactions"]:
        turn = {k: v for k, v in turn.items() if k != "latency_ms"}
        turn["response"] = {k: v for k, v in turn["response"].items() if k != "created"}
        turns.append(turn)
    return {**record, "interactions": turns}


def run_once(start_proxy: Callable[..., str], out: Path, port: int = 0) -> tuple[bytes, int]:
    """One run against a fresh proxy and a fresh upstream (on ``port``: a rerun reaches
    its upstream at the same address, so ``upstream`` is no field that may differ)."""
    with ServerThread(create_fake_sglang(Switches(token_delay_s=0.001)), port=port) as fake:
        proxy = start_proxy([fake.url])
        done = subprocess.run(
            [
                sys.executable,
                str(EXAMPLE),
                "--url",
                proxy,
                "--tasks",
                "2",
                "--group-size",
                "3",
                "--out",
                str(out),
            ],
            env=seedproxy_env(),
            capture_output=True,
            timeout=120,
        )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    lines = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert all(set(turn) >= {"latency_ms", "response"} and "created" in turn["response"]
               for line in lines for turn in line["interactions"])
    return b"\n".join(orjson.dumps(without_clocks(line)) for line in lines), fake.port


def test_the_rl_loop_reruns_to_byte_identical_exports(
    start_proxy: Callable[..., str], tmp_path: Path
) -> None:
    first, port = run_once(start_proxy, tmp_path / "a.jsonl")
    second, _ = run_once(start_proxy, tmp_path / "b.jsonl", port)
    at = next((k for k, (a, b) in enumerate(zip(first, second, strict=False)) if a != b), None)
    assert first == second, first[max(0, (at or 0) - 80):(at or 0) + 80]
    records = [orjson.loads(line) for line in first.split(b"\n")]
    assert [r["session_id"] for r in records] == [
        "task0:0",
        "task0:1",
        "task0:2",
        "task1:0",
        "task1:1",
        "task1:2",
    ]
    for record in records:
        assert [i["request_index"] for i in record["interactions"]] == [0, 1, 2]
        assert all(
            i["prompt_token_ids"] and len(i["completion_token_ids"]) == 12
            for i in record["interactions"]
        )
        assert (
            record["reward"] is not None
            and record["interactions"][-1]["reward"] == record["reward"]
        )
    finals = {
        r["interactions"][-1]["response"]["choices"][0]["message"]["content"] for r in records
    }
    assert len(finals) == 6  # every sample of every task differs

