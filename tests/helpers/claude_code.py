"""Claude Code (the npm package ``@anthropic-ai/claude-code``) as a test client.

The package is installed once into a cache folder: ``SEEDPROXY_CLAUDE_CODE_DIR``, else
``~/.cache/seedproxy/claude-code`` (``.ci/run`` installs it there before the tests).
Without node and npm the tests skip, except under ``CI=true``, where they fail.
``run_claude`` runs it offline in print mode against a base URL, with a throwaway HOME.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from tests.helpers.npm_harness import npm_binary

__all__ = ["claude_binary", "run_claude"]

PACKAGE = "@anthropic-ai/claude-code"


def _cache_dir() -> Path:
    configured = os.environ.get("SEEDPROXY_CLAUDE_CODE_DIR")
    return Path(configured) if configured else Path.home() / ".cache" / "seedproxy" / "claude-code"


def claude_binary() -> Path:
    """The ``claude`` executable, installed into the cache folder on first use
    (``npm_binary``: under a lock, so parallel test workers install it once)."""
    return npm_binary(_cache_dir(), "claude", [PACKAGE])


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
