"""The README's first-screen examples work as a newcomer would type them."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import orjson
import pytest

from seedproxy import derive_seed
from tests.conftest import Fake

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def first_block(pattern: str) -> str:
    match = re.search(pattern, README, re.S)
    assert match, pattern
    return match.group(1)


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_the_curl_example_gets_a_seeded_answer(proxy: str, fake: Fake) -> None:
    command = first_block(r"\n    (curl .*?)\n\n").replace("\\\n", " ")
    command = command.replace("http://127.0.0.1:8000", proxy)
    done = subprocess.run(["bash", "-c", command + " -D /dev/stderr"], capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    answer = orjson.loads(done.stdout)
    assert answer["object"] == "chat.completion" and answer["choices"][0]["message"]["content"]
    assert f"x-seedproxy-seed: {derive_seed('ep-1', 0)}" in done.stderr.decode()
    assert fake.received[0]["seed"] == derive_seed("ep-1", 0)


def test_the_sdk_example_prints_the_seed_and_the_reply(
    proxy: str, fake: Fake, capsys: pytest.CaptureFixture[str]
) -> None:
    code = first_block(r"```python\n(.*?)```").replace("http://127.0.0.1:8000", proxy)
    namespace: dict[str, Any] = {}
    exec(compile(code, "README.md", "exec"), namespace)  # noqa: S102 - our own README
    seed, _, text = capsys.readouterr().out.strip().partition(" ")
    assert seed == str(derive_seed("ep-1", 0)) and text


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
    words = " ".join(README.split())
    assert f"the key is `{key}`" in words
    seeds = [content_seeds("17:3", key, k, 1)[0] for k in (0, 1)]
    assert f"gets seed {seeds[0]} for occurrence 0 and {seeds[1]} for occurrence 1" in words
