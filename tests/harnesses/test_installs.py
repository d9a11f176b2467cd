""".ci/run installs the npm harnesses at the versions the tests pin."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.npm_harness import PACKAGES

CI = Path(__file__).resolve().parents[2] / ".ci" / "run"


def test_ci_installs_the_pinned_npm_harnesses_in_one_install() -> None:
    lines = [line for line in CI.read_text().splitlines()
             if "npm install" in line and "SEEDPROXY_HARNESS_DIR" in line]
    assert len(lines) == 1
    assert lines[0].split()[-len(PACKAGES) - 1:-1] == list(PACKAGES.values())


def test_ci_installs_the_codex_version_the_tests_pin() -> None:
    from tests.helpers.codex_cli import PACKAGE

    lines = [line for line in CI.read_text().splitlines()
             if "npm install" in line and "SEEDPROXY_CODEX_DIR" in line]
    assert len(lines) == 1 and lines[0].split()[-2] == PACKAGE
