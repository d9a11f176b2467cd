"""The issue's "done when": examples/rl_loop.py, run twice against a fresh proxy and
a fresh upstream each time, exports byte-identical trajectories (timings aside)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import orjson

from tests.helpers.fake_sglang import Switches, create_fake_sglang
from tests.helpers.procs import seedproxy_env
from tests.helpers.replay_fields import strip_documented
from tests.helpers.servers import ServerThread

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "rl_loop.py"


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
    kept = [strip_documented(line) | {"session_id": line["session_id"]} for line in lines]
    return b"\n".join(orjson.dumps(line, option=orjson.OPT_SORT_KEYS) for line in kept), fake.port


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
