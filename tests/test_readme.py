"""The README's first-screen examples work as a newcomer would type them, and the
commands it gives are the ones CI runs."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import orjson
import pytest

from seedproxy import derive_seed
from tests.conftest import Fake
from tests.doc_blocks import ROOT, Block, blocks, pages

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
    assert command.endswith("&& pytest -n 4 --dist loadfile") and "torch==2.13.0" in command
    assert command in (ROOT / ".ci" / "run").read_text().splitlines()


# Every block of the README and the docs pages either runs here or says why not.

BLOCKS = [block for page in pages() for block in blocks(page)]
PYTHON = [block for block in BLOCKS if block.lang == "python" and block.not_run is None]


def kind(block: Block) -> str | None:
    """Which test below runs ``block`` (None: none does)."""
    first = block.text.lstrip().split("\n", 1)[0]
    if block.lang in ("python", "toml"):
        return block.lang
    if block.lang == "" and first.startswith("curl ") and block.page == "README.md":
        return "curl"  # the curl and replay tests above
    if block.lang == "" and first.startswith("$ "):
        return "transcript"
    if first.startswith("seed(identity, index) = "):
        return "formula"
    if first == "src/seedproxy/":
        return "layout"
    return None


def test_every_block_runs_or_says_why_not() -> None:
    assert len(BLOCKS) >= 15 and {b.page for b in BLOCKS} >= {"README.md", "docs/seeds.md"}
    for block in BLOCKS:
        if block.not_run is not None:
            assert len(block.not_run) > 10, block.name
        else:
            assert kind(block), f"{block.name} is neither run by a test nor marked not run"


@pytest.mark.parametrize("block", PYTHON, ids=[b.name for b in PYTHON])
def test_every_python_block_runs(
    block: Block, proxy: str, fake: Fake, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = block.text.replace("http://127.0.0.1:8000", proxy)
    code = code.replace('"rollouts.jsonl"', repr(str(tmp_path / "rollouts.jsonl")))
    exec(compile(code, block.name, "exec"), {"__name__": "docs"})  # noqa: S102 - our docs
    assert capsys.readouterr().out.strip()
    assert fake.received and all("seed" in body for body in fake.received)


def test_the_toml_examples_are_valid_configuration(tmp_path: Path) -> None:
    from seedproxy.settings import load_settings

    examples = [b for b in BLOCKS if b.lang == "toml"]
    assert examples
    for block in examples:
        config = tmp_path / "seedproxy.toml"
        config.write_text(block.text)
        settings = load_settings({}, str(config))
        for key, value in tomllib.loads(block.text).items():
            assert getattr(settings, key) == value, (block.name, key)


def test_transcripts_print_what_they_show(tmp_path: Path) -> None:
    shown = [b for b in BLOCKS if kind(b) == "transcript"]
    assert shown
    for block in shown:
        command, *expected = block.text.strip().split("\n")
        argv = shlex.split(command.removeprefix("$ "))
        assert argv[0] == "seedproxy", block.name
        done = subprocess.run([sys.executable, "-m", "seedproxy", *argv[1:]], cwd=tmp_path,
                              capture_output=True, text=True, timeout=120)
        assert (done.stdout + done.stderr).strip().split("\n") == expected, block.name


def test_the_seed_formula_is_the_code_s() -> None:
    import hashlib

    (formula,) = [b.text.strip() for b in BLOCKS if kind(b) == "formula"]
    expression = formula.removeprefix("seed(identity, index) = ")
    for identity, index in [("17:3", 0), ("17:3", 1), ("ep-1", 0), ("☃", 7)]:
        scope = {"sha256": hashlib.sha256, "identity": identity, "index": index}
        assert eval(expression, scope) == derive_seed(identity, index)  # noqa: S307 - our docs


def test_the_layout_names_the_package_s_modules() -> None:
    (tree,) = [b.text for b in BLOCKS if kind(b) == "layout"]
    named = re.findall(r"^  (\S+)", tree, re.M)
    assert "seeds.py" in named and "engine/" in named
    package = ROOT / "src" / "seedproxy"
    for name in named:
        assert (package / name).exists(), name
    listed = {name.split("/")[0].removesuffix(".py") for name in named}
    real = {p.name for p in package.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert real <= listed, real - listed


def test_ci_runs_the_checks_the_development_page_lists() -> None:
    (steps,) = [b for b in BLOCKS if b.page == "docs/development.md" and b.lang == "sh"]
    ci = [" ".join(line.replace(" -q ", " ").split()) for line in
          (ROOT / ".ci" / "run").read_text().splitlines()]
    for step in steps.text.strip().split("\n"):
        assert any(line.startswith(step) for line in ci), step
