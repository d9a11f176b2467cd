"""docs/configuration.md is generated from ``Settings``: the checked-in page is what the
generator writes today, so a new or changed option cannot leave the page behind."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from seedproxy.commands.config_doc import render
from seedproxy.settings import ALIASES, ENV_PREFIX, Settings

PAGE = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_the_checked_in_page_is_the_generated_one() -> None:
    assert PAGE.read_text() == render(), (
        "docs/configuration.md is stale: run "
        "python -m seedproxy.commands.config_doc docs/configuration.md"
    )


def test_every_field_is_one_row_with_its_default_and_docstring() -> None:
    rows = [line for line in render().splitlines() if line.startswith("| `--")]
    assert len(rows) == len(Settings.model_fields)
    by_flag = {row.split(" | ")[0]: row for row in rows}
    assert by_flag["| `--port`"] == (
        "| `--port` | `SEEDPROXY_PORT` | 8000 | >= 0, <= 65535 | Port to bind; 0 binds a "
        "free one, which the "
        "\"seedproxy listening on\" log line names. |")
    assert by_flag["| `--deterministic`, `--no-deterministic`"].split(" | ")[2] == "true"
    assert by_flag["| `--max-body-bytes`"].split(" | ")[2:4] == ["33554432", ">= 1024"]
    assert by_flag["| `--index-by`"].split(" | ")[3] == "one of arrival, content"
    assert "memory:// \\| sqlite:///PATH" in by_flag["| `--store`"]
    for old in ALIASES:
        assert f"`--{old.replace('_', '-')}`" in render(), old


def test_every_printed_default_is_accepted_as_written(monkeypatch: pytest.MonkeyPatch) -> None:
    """A user who copies a default from the page into the environment gets the default."""
    rows = [line.split(" | ") for line in render().splitlines() if line.startswith("| `--")]
    printed = {row[1].strip("`"): row[2] for row in rows if row[2]}
    assert len(printed) > 20
    for env, value in printed.items():
        monkeypatch.setenv(env, value)
    settings = Settings()
    for name, info in Settings.model_fields.items():
        if f"{ENV_PREFIX}{name.upper()}" in printed:
            assert getattr(settings, name) == info.get_default(call_default_factory=True), name


def test_the_module_writes_the_page(tmp_path: Path) -> None:
    out = tmp_path / "configuration.md"
    done = subprocess.run([sys.executable, "-m", "seedproxy.commands.config_doc", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert out.read_text() == render()
