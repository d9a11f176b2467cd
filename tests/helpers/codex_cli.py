"""Codex CLI (the npm package ``@openai/codex``, a native binary in a platform
package) as a test client.

The package is installed once into a cache folder: ``SEEDPROXY_CODEX_DIR``, else
``~/.cache/seedproxy/codex`` (``.ci/run`` installs it there before the tests). Without
node and npm the tests skip, except under ``CI=true``, where they fail. ``run_codex``
runs ``codex exec`` offline against a base URL through a custom model provider with
the Responses wire API, in a throwaway ``CODEX_HOME``.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.helpers.npm_harness import npm_binary

__all__ = ["codex_binary", "model_catalog", "run_codex"]

PACKAGE = "@openai/codex@0.171.0"  # the version .ci/run installs
KEY_ENV = "SEEDPROXY_CODEX_KEY"


def _cache_dir() -> Path:
    configured = os.environ.get("SEEDPROXY_CODEX_DIR")
    return Path(configured) if configured else Path.home() / ".cache" / "seedproxy" / "codex"


def codex_binary() -> Path:
    """The ``codex`` executable, installed into the cache folder on first use, under a
    lock on the folder (parallel test workers install it once)."""
    return npm_binary(_cache_dir(), "codex", [PACKAGE])


def model_catalog(path: Path, slug: str) -> Path:
    """A model catalog (``-c model_catalog_json=PATH``) describing ``slug`` as Codex's
    own catalog describes its GPT-5 models: its ``apply_patch`` is the freeform tool
    with a Lark grammar (``apply_patch_tool_type: freeform``), its shell is
    ``exec_command``."""
    model = {
        "slug": slug, "display_name": slug, "description": "a scripted model",
        "default_reasoning_level": "medium",
        "supported_reasoning_levels": [{"effort": "medium", "description": "medium"}],
        "shell_type": "unified_exec", "visibility": "list", "supported_in_api": True,
        "priority": 1, "upgrade": None, "base_instructions": "You are a coding agent.",
        "supports_reasoning_summaries": True, "default_reasoning_summary": "none",
        "support_verbosity": False, "default_verbosity": None,
        "apply_patch_tool_type": "freeform",
        "truncation_policy": {"mode": "tokens", "limit": 10000},
        "supports_parallel_tool_calls": True, "context_window": 65536,
        "effective_context_window_percent": 95, "experimental_supported_tools": [],
        "input_modalities": ["text"], "supports_search_tool": False,
    }
    path.write_text(json.dumps({"models": [model]}))
    return path


def run_codex(binary: Path, base_url: str, api_key: str, prompt: str, scratch: Path,
              *extra: str, model: str = "seed-model") -> subprocess.CompletedProcess[str]:
    """Run ``codex exec PROMPT`` (no sandbox, no approvals) against ``base_url`` (its
    ``/responses`` is the route) with ``api_key``; ``scratch`` holds its home and work
    folder. Returns the finished process (its last message in ``stdout``)."""
    home, work = scratch / "codex-home", scratch / "work"
    for folder in (home, work):
        folder.mkdir(parents=True, exist_ok=True)
    provider = [
        "-c", "model_provider=seed",
        "-c", 'model_providers.seed.name="seedproxy"',
        "-c", f'model_providers.seed.base_url="{base_url}"',
        "-c", 'model_providers.seed.wire_api="responses"',
        "-c", f'model_providers.seed.env_key="{KEY_ENV}"',
        "-c", "model_providers.seed.request_max_retries=0",
        "-c", "model_providers.seed.stream_max_retries=0",
    ]
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(scratch),
        "CODEX_HOME": str(home),
        KEY_ENV: api_key,
        "NO_COLOR": "1",
    }
    return subprocess.run(
        [str(binary), "exec", "--skip-git-repo-check", "--color", "never",
         "--dangerously-bypass-approvals-and-sandbox", "-m", model, *provider, *extra, prompt],
        cwd=work, env=env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
    )
