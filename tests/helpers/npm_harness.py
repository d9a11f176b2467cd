"""Agent harnesses published on npm, as test clients: opencode (``opencode-ai``) and
qwen-code (``@qwen-code/qwen-code``), installed once, together, into a cache folder:
``SEEDPROXY_HARNESS_DIR``, else ``~/.cache/seedproxy/harnesses`` (``.ci/run`` installs
them there before the tests, with the same pinned versions). The check and the install
hold a lock on the folder, so parallel test workers install once and never see a
half-installed package. Without node and npm the tests skip, except under ``CI=true``,
where they fail."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

import pytest

__all__ = ["PACKAGES", "harness_binary", "npm_binary"]

PACKAGES = {"opencode": "opencode-ai@1.18.33", "qwen": "@qwen-code/qwen-code@0.15.10"}
"""Each harness's executable and the npm package (pinned) that brings it."""


def _cache_dir() -> Path:
    configured = os.environ.get("SEEDPROXY_HARNESS_DIR")
    return Path(configured) if configured else Path.home() / ".cache" / "seedproxy" / "harnesses"


def npm_binary(folder: Path, name: str, packages: list[str]) -> Path:
    """``name`` from ``folder/node_modules/.bin``, installing ``packages`` there (in one
    ``npm install``) when it is missing."""
    binary = folder / "node_modules" / ".bin" / name
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if binary.exists():
            return binary
        if shutil.which("npm") is None or shutil.which("node") is None:
            if os.environ.get("CI") == "true":
                pytest.fail(f"{name} tests need node and npm under CI")
            pytest.skip("node and npm are not installed")
        done = subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", "--prefix", str(folder), *packages],
            capture_output=True,
            text=True,
            timeout=1800,
        )
        if done.returncode != 0 or not binary.exists():
            pytest.fail(f"npm install {' '.join(packages)} failed: {done.stderr[-2000:]}")
        return binary


def harness_binary(name: str) -> Path:
    """The executable ``name`` (a key of ``PACKAGES``)."""
    return npm_binary(_cache_dir(), name, list(PACKAGES.values()))
