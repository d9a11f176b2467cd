"""Claude Code (the npm package ``@anthropic-ai/claude-code``) as a test client.

The package is installed once into a cache folder: ``SEEDPROXY_CLAUDE_CODE_DIR``, else
``~/.cache/seedproxy/claude-code`` (``.ci/run`` installs it there before the tests).
Without node and npm the tests skip, except under ``CI=true``, where they fail.
``run_claude`` runs it offline in print mode against a base URL, with a throwaway HOME.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

__all__ = ["claude_binary", "run_claude"]

PACKAGE = "@anthropic-ai/claude-code"


def _cache_dir() -> Path:
    configured = os.environ.get("SEEDPROXY_CLAUDE_CODE_DIR")
    return Path(configured) if configured else Path.home() / ".cache" / "seedproxy" / "claude-code"


def claude_binary() -> Path:
    """The ``claude`` executable, installed into the cache folder on first use. The
    check and the install hold a lock on the folder, so parallel test workers
    (pytest-xdist) install it once and never see a half-installed package."""
    folder = _cache_dir()
    binary = folder / "node_modules" / ".bin" / "claude"
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if binary.exists():
            return binary
        if shutil.which("npm") is None or shutil.which("node") is None:
            if os.environ.get("CI") == "true":
                pytest.fail("Claude Code tests need node and npm under CI")
            pytest.skip("node and npm are not installed")
        done = subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", "--prefix", str(folder), PACKAGE],
            capture_output=True,
            text=True,
            timeout=600,
        )
        if done.returncode != 0 or not binary.exists():
            pytest.fail(f"npm install {PACKAGE} failed: {done.stderr[-2000:]}")
        return binary


def run_claude(
    binary: Path,
    base_url: str,
    api_key: str,
    prompt: str,
    scratch: Path,
    *extra: str,
    max_output_tokens: int | None = None,
    check: bool = True,
    side_requests: bool = False,
) -> dict[str, Any]:
    """Run one ``claude -p PROMPT --output-format json`` and return its JSON result;
    ``max_output_tokens`` sets the ``max_tokens`` it asks for (else its own 32000);
    ``check`` asserts that it exited 0; ``side_requests``: leave Claude Code's
    non-essential requests on (its title request), telemetry and updates still off."""
    home = scratch / "home"
    work = scratch / "work"
    for folder in (home, work, scratch / "tmp"):
        folder.mkdir(parents=True, exist_ok=True)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "CLAUDE_CODE_TMPDIR": str(scratch / "tmp"),
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": api_key,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_AUTOUPDATER": "1",
        "IS_SANDBOX": "1",  # --dangerously-skip-permissions is refused to root without it
    }
    if side_requests:
        del env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"]
    if max_output_tokens is not None:
        env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] = str(max_output_tokens)
    done = subprocess.run(
        [
            str(binary),
            "-p",
            prompt,
            "--output-format",
            "json",
            "--model",
            "seed-model",
            "--max-turns",
            "4",
            *extra,
        ],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0 or not check, (
        f"claude failed ({done.returncode}): {done.stdout[-3000:]} {done.stderr[-3000:]}"
    )
    result: dict[str, Any] = json.loads(done.stdout)
    return result
