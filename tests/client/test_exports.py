"""seedproxy.client's public names are exactly its ``__all__``, and it imports
nothing from the proxy but the exported JSON's fields (it is an HTTP client)."""

from __future__ import annotations

import ast
import subprocess
import sys

import seedproxy.client as client
from tests.helpers.procs import seedproxy_env


def test_all_lists_every_public_name() -> None:
    public = {name for name in vars(client) if not name.startswith("_")} - {"annotations"}
    assert public == set(client.__all__)


def test_importing_the_client_loads_no_proxy_module() -> None:
    code = (
        "import sys, seedproxy.client; "
        "print(sorted(m for m in sys.modules if m.startswith('seedproxy.')))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], env=seedproxy_env(), capture_output=True, text=True
    )
    assert loaded.returncode == 0, loaded.stderr
    loaded_names = ast.literal_eval(loaded.stdout.strip())
    modules = [m for m in loaded_names if not m.startswith("seedproxy.client")]
    # the package root's and the exported JSON's fields; nothing of the proxy
    assert modules == ["seedproxy.seeds", "seedproxy.trajectory"]
