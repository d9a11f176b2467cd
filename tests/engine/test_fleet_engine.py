"""Issue 12's pause scenario for real, on CPU: 32 token-id rollouts (half streamed)
through a proxy in front of the engine; the fleet pauses in each mode mid-generation,
the weight version moves to v2, the fleet continues. Every client gets a complete answer,
each session's index is used once, the spans say which version made which tokens, and
the tokens and logprobs equal a run with no pause (the label moved, not the weights)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from seedproxy import derive_seed
from seedproxy.engine import RunningEngine, start_engine_thread
from seedproxy.engine.testing import tiny_model
from tests.helpers.step_hold import StepHold
from tests.helpers.waiting import wait_until

ROLLOUTS = 32
BATCH = 8
NEW = 10
AT = 1


@pytest.fixture(scope="module")
def hold() -> StepHold:
    return StepHold()


@pytest.fixture(scope="module")
def held_engine(hold: StepHold) -> Iterator[RunningEngine]:
    running = start_engine_thread(tiny_model(), max_batch=BATCH, on_step=hold)
    yield running
    running.stop()



def prompt_of(i: int) -> list[int]:
    return [100 + i, 200 + i, 300]


def rollout_body(i: int) -> dict[str, Any]:
    return {"input_ids": prompt_of(i), "return_logprob": True, "stream": i % 2 == 0,
            "sampling_params": {"max_new_tokens": NEW, "ignore_eos": True}}


def tokens(answer: dict[str, Any]) -> tuple[list[int], list[float]]:
    pairs = answer["meta_info"]["output_token_logprobs"]
    assert [t for _, t, _ in pairs] == answer["output_ids"]
    return answer["output_ids"], [lp for lp, _, _ in pairs]


def unpaused(engine: str, session: str, i: int) -> dict[str, Any]:
    """Rollout ``i`` straight from the engine, with the seed the proxy gives it."""
    body = rollout_body(i)
    body["stream"] = False
    body["sampling_params"]["sampling_seed"] = derive_seed(session, 0)
    answer: dict[str, Any] = httpx.post(f"{engine}/generate", json=body, timeout=120).json()
    return answer


def run_rollout(proxy: str, session: str, i: int) -> dict[str, Any]:
    body = rollout_body(i)
    url = f"{proxy}/sessions/{session}/generate"
    if not body["stream"]:
        answer: dict[str, Any] = httpx.post(url, json=body, timeout=120).json()
        return answer
    finals, lengths = [], []
    with httpx.stream("POST", url, json=body, timeout=120) as response:
        for line in response.iter_lines():
            if line.startswith("data: {"):
                finals.append(httpx.Response(200, content=line[6:]).json())
                lengths.append(len(finals[-1]["output_ids"]))
    assert lengths == sorted(lengths)  # one uninterrupted, growing answer
    return finals[-1]


@pytest.mark.parametrize("mode", ["abort", "in_place", "retract"])
def test_a_fleet_pause_and_version_bump_mid_generation_on_the_engine(
        mode: str, held_engine: RunningEngine, hold: StepHold,
        start_proxy: Callable[..., str]) -> None:
    engine = held_engine.url
    proxy = start_proxy([engine])
    sessions = [f"{mode}-r-{i}" for i in range(ROLLOUTS)]
    hold.reset()
    # Line the rollouts up in the engine's queue, so the first batch starts together.
    httpx.post(f"{engine}/pause_generation", json={"mode": "in_place"}).raise_for_status()
    finals: dict[int, dict[str, Any]] = {}
    workers = [threading.Thread(target=lambda i=i: finals.__setitem__(
        i, run_rollout(proxy, sessions[i], i))) for i in range(ROLLOUTS)]
    for worker in workers:
        worker.start()
    wait_until(lambda: httpx.get(f"{engine}/get_server_info").json()["waiting"] == ROLLOUTS)
    hold.arm(AT, count=BATCH)
    httpx.post(f"{engine}/continue_generation").raise_for_status()
    try:
        assert hold.held.wait(60)
        httpx.post(f"{proxy}/fleet/pause", json={"mode": mode}).raise_for_status()
    finally:
        hold.release()
    bumped = httpx.post(f"{proxy}/fleet/weight_version",
                        json={"version": "v2", "abort_all_requests": False})
    assert bumped.json()["upstreams"][0]["ok"] is True
    assert httpx.get(f"{engine}/get_server_info").json()["paused"] == mode
    httpx.post(f"{proxy}/fleet/continue").raise_for_status()
    for worker in workers:
        worker.join(120)
    httpx.post(f"{engine}/update_weight_version",
               json={"new_version": "default", "abort_all_requests": False})

    made = {tuple(req.prompt_ids): n for req, n in hold.batch}  # tokens at the pause
    # mid-generation: every one of the batch has tokens and more to make (the batch's
    # prompts were prefilled over several steps, so their counts differ)
    assert len(made) == BATCH and AT <= min(made.values()) <= max(made.values()) < NEW - 1
    # In abort mode each rollout ran again as a new request (prompt + tokens so far);
    # the queued ones were aborted before they ever ran.
    attempts = {rid for step in hold.steps for rid, _ in step}
    assert len(attempts) == ROLLOUTS + (BATCH if mode == "abort" else 0)
    for i in range(ROLLOUTS):
        final = finals[i]
        meta = final["meta_info"]
        assert meta["finish_reason"]["type"] == "length"
        assert (meta["completion_tokens"], meta["prompt_tokens"]) == (NEW, 3)
        assert tokens(final) == tokens(unpaused(engine, sessions[i], i))
        before = made.get(tuple(prompt_of(i)), 0)
        spans = [{"version": "default", "start": 0, "end": before}] if before else []
        spans.append({"version": "v2", "start": before, "end": NEW})
        assert meta["weight_versions"] == spans, i
        record = httpx.get(f"{proxy}/sessions/{sessions[i]}/trajectory").json()
        interactions = record["interactions"]
        assert [r["request_index"] for r in interactions] == [0]
        assert interactions[0]["completion_token_ids"] == final["output_ids"]
        assert interactions[0]["prompt_token_ids"] == prompt_of(i)
        assert interactions[0]["weight_versions"] == spans
        assert (interactions[0]["dispatch_weight_version"],
                interactions[0]["weight_version"]) == ("default", "v2")


def test_a_client_that_leaves_a_stream_has_its_request_aborted_on_the_engine(
        held_engine: RunningEngine, hold: StepHold, start_proxy: Callable[..., str]) -> None:
    proxy = start_proxy([held_engine.url])
    hold.reset()
    hold.arm(1)  # held right after token 1 is sent, so the abort always lands while held
    body = {"input_ids": [7, 8, 9], "stream": True,
            "sampling_params": {"max_new_tokens": 400, "ignore_eos": True}}
    try:
        with httpx.stream("POST", f"{proxy}/sessions/gone-1/generate", json=body,
                          timeout=60) as response:
            for line in response.iter_lines():
                if line.startswith("data: {"):
                    break  # leave after the first chunk
        assert hold.held.wait(60)
        (rid,) = {req.rid for req, _ in hold.batch}
        assert rid.startswith("seedproxy-")
        worker = held_engine.server.config.app.state.engine.worker
        wait_until(lambda: worker.stopping(rid))  # while the worker is held at token 1
    finally:
        hold.release()
    record = httpx.get(f"{proxy}/sessions/gone-1/trajectory").json()["interactions"]
    assert [r["abandoned"] for r in record] == [True]
    wait_until(lambda: httpx.get(f"{held_engine.url}/get_server_info").json()["running"] == 0)
    made = [n for step in hold.steps for r, n in step if r == rid]
    assert made[-1] == 1  # the engine stopped where the worker was held: aborted
