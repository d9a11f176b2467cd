"""The product on a laptop: openai SDK -> seedproxy -> the embedded engine (tiny model)."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from seedproxy import derive_seed
from seedproxy.engine import RunningEngine
from tests.helpers.procs import seedproxy_env
from tests.helpers.serving import Serving
from tests.helpers.waiting import HANG_S

MSG = [{"role": "user", "content": "Write a short poem about the sea."}]


@pytest.fixture
def proxy(engine: RunningEngine, start_proxy: Callable[..., str]) -> str:
    return start_proxy([engine.url])


@pytest.fixture
def admin(proxy: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=proxy, timeout=60) as client:
        yield client


def session(admin: httpx.Client, identity: str) -> openai.OpenAI:
    made = admin.post("/sessions", json={"identity": identity}).json()["sessions"][0]
    return openai.OpenAI(base_url=made["base_url"], api_key="x", max_retries=0, timeout=HANG_S)


def turn(admin: httpx.Client, session_id: str, index: int = 0) -> dict[str, Any]:
    return admin.get(f"/sessions/{session_id}/trajectory").json()["interactions"][index]


def ask(c: openai.OpenAI, **kw: Any) -> str:
    reply = c.chat.completions.create(model="m", messages=MSG, max_tokens=12, **kw)
    return reply.choices[0].message.content or ""


def test_the_same_identity_replays_text_token_ids_and_logprobs_bit_for_bit(
    admin: httpx.Client,
) -> None:
    texts = [ask(session(admin, "poem")), ask(session(admin, "poem"))]
    first, second = turn(admin, "poem"), turn(admin, "poem-1")
    assert texts[0] == texts[1]
    assert first["seed"] == second["seed"] == derive_seed("poem", 0)
    assert first["completion_token_ids"] == second["completion_token_ids"]
    assert len(first["completion_token_ids"]) == 12
    assert first["logprobs"] == second["logprobs"]
    assert first["prompt_token_ids"] == second["prompt_token_ids"] != []


def test_different_identities_sample_differently(admin: httpx.Client) -> None:
    for identity in ("a", "b", "c"):
        ask(session(admin, f"diff-{identity}"))
    samples = {tuple(turn(admin, f"diff-{i}")["completion_token_ids"]) for i in "abc"}
    assert len(samples) == 3


async def test_concurrent_requests_each_get_what_they_get_alone(
    admin: httpx.Client, proxy: str
) -> None:
    def client(sid: str) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(
            base_url=f"{proxy}/sessions/{sid}/v1", api_key="x", max_retries=0, timeout=120
        )

    async def one(sid: str) -> str:
        async with client(sid) as c:
            reply = await c.chat.completions.create(model="m", messages=MSG, max_tokens=8)
            return reply.choices[0].message.content or ""

    together = await asyncio.gather(*(one(f"crowd-{i}") for i in range(8)))
    alone = []
    for i in range(8):  # the same identities again, one request at a time
        admin.post("/sessions", json={"identity": f"crowd-{i}"})
        alone.append(await one(f"crowd-{i}-1"))
    assert alone == together
    assert len(set(together)) == 8


def test_resubmitting_a_prefix_with_the_same_seed_continues_identically(
    admin: httpx.Client,
) -> None:
    prompt = [1, 504, 3100, 28, 253, 1789]
    whole = admin.post(
        "/sessions/prefix/generate",
        json={
            "input_ids": prompt,
            "sampling_params": {"max_new_tokens": 10},
            "return_logprob": True,
        },
    ).json()
    out = whole["output_ids"]
    resumed = admin.post(
        "/sessions/prefix/generate",
        json={
            "input_ids": prompt + out[:4],
            "sampling_params": {"max_new_tokens": 6},
            "return_logprob": True,
        },
        headers={"X-Request-Index": "0"},
    ).json()
    assert resumed["output_ids"] == out[4:]
    lps = [entry[0] for entry in whole["meta_info"]["output_token_logprobs"]]
    assert [entry[0] for entry in resumed["meta_info"]["output_token_logprobs"]] == lps[4:]


def test_stream_and_non_stream_give_the_same_tokens(admin: httpx.Client) -> None:
    whole = ask(session(admin, "twin"))
    streamed = session(admin, "twin").chat.completions.create(
        model="m", messages=MSG, max_tokens=12, stream=True
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in streamed if chunk.choices)
    assert text == whole
    assert (
        turn(admin, "twin")["completion_token_ids"] == turn(admin, "twin-1")["completion_token_ids"]
    )


def test_temperature_zero_ignores_the_seed(admin: httpx.Client) -> None:
    greedy = [ask(session(admin, f"greedy-{i}"), temperature=0) for i in range(3)]
    assert len(set(greedy)) == 1
    seeds = {turn(admin, f"greedy-{i}")["seed"] for i in range(3)}
    assert len(seeds) == 3


def test_serve_without_upstream_runs_the_engine_in_process(
        tiny_model_dir: Path, tmp_path: Path) -> None:
    served = Serving("--model", str(tiny_model_dir), log=tmp_path / "serve.log")
    try:
        url = served.wait(120).url
        c = openai.OpenAI(base_url=f"{url}/sessions/ep-1/v1", api_key="x", max_retries=0)
        assert [m.id for m in c.models.list()] == [tiny_model_dir.name]
        raw = c.chat.completions.with_raw_response.create(model="m", messages=MSG, max_tokens=5)
        assert raw.headers["x-seedproxy-seed"] == str(derive_seed("ep-1", 0))
        assert raw.parse().usage.completion_tokens == 5
        # Token in, token out is on by itself with the embedded engine.
        turn = httpx.get(f"{url}/sessions/ep-1/trajectory").json()
        assert turn["interactions"][0]["lineage"] == {
            "extends": None, "forked_from": None,
            "prompt": {"kind": "rendered", "reason": {"message": None, "what": "first turn"}}}
    finally:
        served.stop(signal.SIGINT)


def test_a_missing_model_path_is_a_one_line_error() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "seedproxy", "serve", "--model", "/nope/model.gguf", "--port", "0"],
        env=seedproxy_env(), capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr.strip().startswith("seedproxy: error:") and "/nope/model.gguf" in done.stderr
    assert "Traceback" not in done.stderr


def test_verify_logprobs_finds_the_embedded_engine_by_itself(
        tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``serve`` prints the engine's address, ``GET /fleet`` names the same one, and
    ``verify-logprobs`` without ``--engine`` teacher-forces through it."""
    from seedproxy.commands.cli import main

    served = Serving("--model", str(tiny_model_dir), log=tmp_path / "serve.log")
    try:
        served.line("embedded engine serving")  # fails the test if serve exits first
        lines = list(served.lines)
        printed = [line for line in lines if "embedded engine serving" in line]
        assert len(printed) == 1, lines
        listening = [n for n, line in enumerate(lines) if "seedproxy listening" in line]
        assert listening and listening[0] < lines.index(printed[0]), lines  # port first
        url = served.wait(120).url
        engine = httpx.get(f"{url}/fleet").json()["engine"]
        assert engine.startswith("http://127.0.0.1:") and f" at {engine} " in printed[0]
        assert engine != url and httpx.get(f"{engine}/health").status_code == 200
        c = openai.OpenAI(base_url=f"{url}/sessions/vl-1/v1", api_key="x", max_retries=0)
        c.chat.completions.create(model="m", messages=MSG, max_tokens=6, temperature=0.8)
        capsys.readouterr()
        assert main(["verify-logprobs", "--url", url, "--session", "vl-1"]) == 0
        assert "6 sampled tokens, 6 match, max |diff| 0" in capsys.readouterr().out
    finally:
        served.stop(signal.SIGINT)


def test_verify_logprobs_without_an_embedded_engine_asks_for_one(
        proxy: str, capsys: pytest.CaptureFixture[str]) -> None:
    from seedproxy.commands.cli import main

    assert httpx.get(f"{proxy}/fleet").json()["engine"] is None
    assert main(["verify-logprobs", "--url", proxy, "--session", "none"]) == 2
    err = capsys.readouterr().err
    assert "runs no embedded engine" in err and "pass --engine" in err
