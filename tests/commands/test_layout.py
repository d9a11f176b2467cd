"""Imports flow one way: ``seedproxy.commands`` imports ``seedproxy.proxy``, never the
reverse, so the HTTP surface loads without the command line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.helpers.procs import seedproxy_env

PROXY = Path(__file__).resolve().parents[2] / "src" / "seedproxy" / "proxy"


def test_the_http_surface_never_imports_the_commands() -> None:
    for path in PROXY.rglob("*.py"):
        imports = [line for line in path.read_text().splitlines()
                   if line.lstrip().startswith(("from ", "import "))]
        assert not [line for line in imports if "commands" in line], path
    code = ("import sys, seedproxy.proxy.app, seedproxy.proxy.factory; "
            "print(sorted(m for m in sys.modules if m.startswith('seedproxy.commands')))")
    done = subprocess.run([sys.executable, "-c", code], env=seedproxy_env(),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
