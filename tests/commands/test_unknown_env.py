"""An unknown ``SEEDPROXY_*`` variable is ignored with a warning naming the closest
setting's variable; known ones (settings, their older spellings, the engine's own)
are silent."""

from __future__ import annotations

import subprocess
import sys

from seedproxy.settings import NOT_SETTINGS, Settings, unknown_env
from tests.helpers.procs import seedproxy_env


def test_a_misspelled_variable_names_the_closest_setting() -> None:
    assert unknown_env({"SEEDPROXY_ADMIN_KY": "k", "SEEDPROXY_MAX_BATCHES": "4",
                        "SEEDPROXY_READ_TIMEOUT": "9", "HOME": "/root"}) == [
        "SEEDPROXY_ADMIN_KY is not a seedproxy setting and is ignored; "
        "did you mean SEEDPROXY_ADMIN_KEY?",
        "SEEDPROXY_MAX_BATCHES is not a seedproxy setting and is ignored; "
        "did you mean SEEDPROXY_ENGINE_MAX_BATCH?",
    ]


def test_nothing_close_is_named_without_a_guess() -> None:
    assert unknown_env({"SEEDPROXY_ZQXJ": "1"}) == [
        "SEEDPROXY_ZQXJ is not a seedproxy setting and is ignored"]


def test_settings_spellings_and_the_engines_variables_are_silent() -> None:
    environ = {f"SEEDPROXY_{name.upper()}": "x" for name in Settings.model_fields}
    environ.update({"SEEDPROXY_MAX_BATCH": "4", "seedproxy_session_ttl": "5",
                    "SEEDPROXY_CACHE_DIR": "/tmp", "SEEDPROXY_ENGINE_THREADS": "1"})
    assert unknown_env(environ) == []
    assert not NOT_SETTINGS & set(Settings.model_fields)


def test_serve_prints_the_warning_before_anything_else() -> None:
    """A real ``serve`` (refused on a bad port, so nothing starts) warns first."""
    done = subprocess.run(
        [sys.executable, "-m", "seedproxy", "serve", "--upstream", "http://127.0.0.1:9",
         "--port", "-1"],
        env=seedproxy_env(SEEDPROXY_MAX_BATCHS="4"), capture_output=True, text=True,
        timeout=120)
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert lines[0] == ("seedproxy: warning: SEEDPROXY_MAX_BATCHS is not a seedproxy setting "
                        "and is ignored; did you mean SEEDPROXY_ENGINE_MAX_BATCH?")
    assert lines[1].startswith("seedproxy: error:")
