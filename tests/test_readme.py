"""The README's first-screen examples work as a newcomer would type them, and the
commands it gives are the ones CI runs."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import orjson
import pytest

from seedproxy import derive_seed
from tests.conftest import Fake

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
SEEDS_PAGE = (ROOT / "docs" / "seeds.md").read_text()


def first_block(pattern: str) -> str:
    match = re.search(pattern, README, re.S)
    assert match, pattern
    return match.group(1)


def head_and_body(output: bytes) -> tuple[str, bytes]:
    """Split what ``curl -i`` prints into its header block and its body."""
    head, _, body = output.partition(b"\r\n\r\n")
    return head.decode().lower(), body


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_the_curl_example_shows_the_seed_and_gets_a_seeded_answer(proxy: str, fake: Fake) -> None:
    command = first_block(r"\n    (curl .*?)\n\n").replace("\\\n", " ")
    assert command.startswith("curl -si ")
    command = command.replace("http://127.0.0.1:8000", proxy)
    done = subprocess.run(["bash", "-c", command], capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    head, body = head_and_body(done.stdout)
    answer = orjson.loads(body)
    assert answer["object"] == "chat.completion" and answer["choices"][0]["message"]["content"]
    seed = derive_seed("ep-1", 0)
    lines = head.split("\r\n")
    assert f"x-seedproxy-seed: {seed}" in lines and "x-seedproxy-request-index: 0" in lines
    assert fake.received[0]["seed"] == seed
    # the value the README quotes for that header is the rule's
    assert f"`x-seedproxy-seed: {seed}`" in README


def test_the_sdk_example_prints_the_seed_and_the_reply(
    proxy: str, fake: Fake, capsys: pytest.CaptureFixture[str]
) -> None:
    code = first_block(r"```python\n(.*?)```").replace("http://127.0.0.1:8000", proxy)
    namespace: dict[str, Any] = {}
    exec(compile(code, "README.md", "exec"), namespace)  # noqa: S102 - our own README
    seed, _, text = capsys.readouterr().out.strip().partition(" ")
    assert seed == str(derive_seed("ep-1", 0)) and text


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_the_replay_example_gives_the_curls_answer_again(proxy: str, fake: Fake) -> None:
    def run(command: str) -> dict[str, Any]:
        command = command.replace("\\\n", " ").replace("http://127.0.0.1:8000", proxy)
        done = subprocess.run(["bash", "-c", command], capture_output=True, timeout=60)
        assert done.returncode == 0, done.stderr
        body = head_and_body(done.stdout)[1] if "curl -si" in command else done.stdout
        return orjson.loads(body)  # type: ignore[no-any-return]

    first = run(first_block(r"\n    (curl .*?)\n\n"))
    opened, replayed = first_block(r"\n    (curl -s \S+/sessions -H.*?)\n\n").split("\n", 1)
    session = run(opened)["sessions"][0]
    assert (session["session_id"], session["identity"]) == ("ep-1-1", "ep-1")
    again = run(replayed)
    assert again["choices"] == first["choices"]
    assert [b["seed"] for b in fake.received] == [derive_seed("ep-1", 0)] * 2


def test_the_sdk_is_installed_by_the_run_command_and_the_license_matches() -> None:
    """The README's run command installs the core and the engine extra: openai must be
    in them, since the SDK example follows it. LICENSE is the licence pyproject names."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    run = first_block(r"\*\*Run\*\*.*?\n    (pip install .*?)\n")
    assert "'.[engine]'" in run
    installed = project["dependencies"] + project["optional-dependencies"]["engine"]
    assert any(re.match(r"openai\b", requirement) for requirement in installed)
    assert project["license"] == "Apache-2.0"
    text = (ROOT / "LICENSE").read_text()
    assert text.split()[:4] == ["Apache", "License", "Version", "2.0,"]
    assert "END OF TERMS AND CONDITIONS" in text


def test_the_anthropic_example_prints_the_seed_and_the_reply(
    proxy: str, fake: Fake, capsys: pytest.CaptureFixture[str]
) -> None:
    code = first_block(r"```python\n(import anthropic\n.*?)```")
    code = code.replace("http://127.0.0.1:8000", proxy)
    namespace: dict[str, Any] = {}
    exec(compile(code, "README.md", "exec"), namespace)  # noqa: S102 - our own README
    seed, _, text = capsys.readouterr().out.strip().partition(" ")
    assert seed == str(derive_seed("ep-2", 0)) and text
    assert fake.received[0]["seed"] == derive_seed("ep-2", 0)


def test_the_content_keyed_known_values_are_the_code_s() -> None:
    from seedproxy.seeds import content_key, content_seeds

    body = {"model": "m", "messages": [{"role": "user", "content": "héllo"}], "temperature": 0.7}
    key = content_key("/v1/chat/completions", body)
    words = " ".join(SEEDS_PAGE.split())
    assert f"the key is `{key}`" in words
    seeds = [content_seeds("17:3", key, k, 1)[0] for k in (0, 1)]
    assert f"gets seed {seeds[0]} for occurrence 0 and {seeds[1]} for occurrence 1" in words


def test_ci_runs_the_readme_s_test_command_verbatim() -> None:
    command = first_block(r"\*\*Test\*\*.*?\n    (pip install .*?)\n")
    assert command.endswith("&& pytest") and "torch==2.13.0" in command
    assert command in (ROOT / ".ci" / "run").read_text().splitlines()
