"""The README's client example runs as printed, against a proxy in front of the fake
SGLang, and leaves eight rewarded trajectories in its file."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson
import pytest

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def test_the_readme_client_example_runs(
    proxy: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    match = re.search(r"## Rollouts from Python.*?```python\n(.*?)```", README, re.S)
    assert match
    out = tmp_path / "rollouts.jsonl"
    code = match.group(1).replace("http://127.0.0.1:8000", proxy)
    code = code.replace('"rollouts.jsonl"', repr(str(out)))
    namespace: dict[str, Any] = {"__name__": "readme"}
    exec(compile(code, "README.md", "exec"), namespace)  # noqa: S102 - our own README
    records = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert [r["session_id"] for r in records] == [f"primes:{i}" for i in range(8)]
    assert all(len(r["interactions"]) == 2 and r["reward"] in (0.0, 1.0) for r in records)
    count, _, rewards = capsys.readouterr().out.strip().partition(" ")
    assert count == "8" and rewards == str([r["reward"] for r in records])
