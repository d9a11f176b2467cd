"""The engine's control plane, over real HTTP: ``/pause_generation`` in each of SGLang's
modes mid-generation, ``/continue_generation``, ``/update_weight_version`` and the
per-token weight-version spans. The worker is held at a known token count by an
``on_step`` checkpoint, so nothing here depends on timing."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from seedproxy.engine import RunningEngine, start_engine_thread
from seedproxy.engine.testing import tiny_model
from tests.helpers.step_hold import StepHold
from tests.helpers.waiting import wait_until

NEW = 12


@pytest.fixture(scope="module")
def hold() -> StepHold:
    return StepHold()


@pytest.fixture(scope="module")
def engines(hold: StepHold) -> Iterator[dict[str, RunningEngine]]:
    """One engine with the prefix cache, one without (a retract then prefills all)."""
    model = tiny_model()
    running = {"warm": start_engine_thread(model, on_step=hold),
               "cold": start_engine_thread(model, on_step=hold, cache_mb=0)}
    yield running
    for engine in running.values():
        engine.stop()


@pytest.fixture
def http(engines: dict[str, RunningEngine], hold: StepHold) -> Iterator[httpx.Client]:
    """A client of the warm engine; afterwards every engine is running, unpaused, on
    the default version."""
    hold.reset()
    with httpx.Client(base_url=engines["warm"].url, timeout=120) as client:
        yield client
    hold.release()
    for engine in engines.values():
        httpx.post(f"{engine.url}/continue_generation").raise_for_status()
        httpx.post(f"{engine.url}/update_weight_version",
                   json={"new_version": "default", "abort_all_requests": False}
                   ).raise_for_status()


def body(prompt: list[int], rid: str, new: int = NEW, seed: int = 7) -> dict[str, Any]:
    return {"input_ids": prompt, "rid": rid, "return_logprob": True,
            "sampling_params": {"max_new_tokens": new, "ignore_eos": True,
                                "sampling_seed": seed, "temperature": 1.0}}


def in_background(call: Callable[[], httpx.Response]) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(call().json()))
    thread.start()
    return thread, out



def tokens(answer: dict[str, Any]) -> tuple[list[int], list[float]]:
    pairs = answer["meta_info"]["output_token_logprobs"]
    assert [t for _, t, _ in pairs] == answer["output_ids"]
    return answer["output_ids"], [lp for lp, _, _ in pairs]


def test_an_abort_pause_ends_a_running_request_with_its_partial_output(
        http: httpx.Client, hold: StepHold) -> None:
    prompt = [5, 6, 7]
    unpaused = http.post("/generate", json=body(prompt, "a-ref")).json()
    hold.arm(3)
    thread, out = in_background(lambda: http.post("/generate", json=body(prompt, "a-1")))
    assert hold.held.wait(60)
    paused = http.post("/pause_generation", json={"mode": "abort"})
    assert paused.status_code == 200
    assert paused.json() == {"message": "Generation paused successfully.", "status": "ok"}
    hold.release()
    thread.join(60)
    meta = out[0]["meta_info"]
    assert meta["finish_reason"]["type"] == "abort"
    assert meta["completion_tokens"] == 3
    ids, logprobs = tokens(out[0])
    ref_ids, ref_logprobs = tokens(unpaused)
    assert (ids, logprobs) == (ref_ids[:3], ref_logprobs[:3])
    assert meta["weight_versions"] == [{"version": "default", "start": 0, "end": 3}]
    resumed = http.post("/continue_generation")
    assert resumed.json() == {"message": "Generation continued successfully.", "status": "ok"}
    assert http.post("/generate", json=body(prompt, "a-2")).json()["output_ids"] == ref_ids


@pytest.mark.parametrize("mode,engine", [("in_place", "warm"), ("retract", "warm"),
                                         ("retract", "cold")])
def test_in_place_and_retract_finish_exactly_as_an_unpaused_run(
        mode: str, engine: str, engines: dict[str, RunningEngine], http: httpx.Client,
        hold: StepHold) -> None:
    """Tokens and logprobs equal the unpaused run's bit for bit; a retract re-prefills
    prompt + output so far (all of it on the engine without a prefix cache)."""
    url = engines[engine].url
    prompt = list(range(40, 60))  # longer than a step's rows: the prefill takes steps
    unpaused = httpx.post(f"{url}/generate", json=body(prompt, "p-ref"), timeout=120).json()
    hold.arm(4)
    thread, out = in_background(lambda: httpx.post(
        f"{url}/generate", json=body(prompt, f"p-{mode}"), timeout=120))
    assert hold.held.wait(60)
    httpx.post(f"{url}/pause_generation", json={"mode": mode}).raise_for_status()
    hold.release()
    if mode == "retract":  # the request went back to the queue
        wait_until(lambda: httpx.get(f"{url}/get_server_info").json()["waiting"] == 1)
    assert httpx.get(f"{url}/get_server_info").json()["paused"] == mode
    assert thread.is_alive()
    httpx.post(f"{url}/continue_generation", json={}).raise_for_status()
    thread.join(60)
    assert out[0]["meta_info"]["finish_reason"]["type"] == "length"
    assert tokens(out[0]) == tokens(unpaused)
    assert out[0]["meta_info"]["weight_versions"] == [
        {"version": "default", "start": 0, "end": NEW}]


@pytest.mark.parametrize("engine", ["warm", "cold"])
def test_a_retract_mid_prefill_keeps_the_prompts_input_logprobs(
        engine: str, engines: dict[str, RunningEngine], hold: StepHold,
        http: httpx.Client) -> None:
    url = engines[engine].url
    prompt = list(range(100, 130))  # four steps of prefill at 8 rows a step
    asked = {**body(prompt, "i-ref", new=4), "logprob_start_len": 0}
    unpaused = httpx.post(f"{url}/generate", json=asked, timeout=120).json()
    hold.arm(0)  # after the first prefill step
    thread, out = in_background(lambda: httpx.post(
        f"{url}/generate", json={**asked, "rid": "i-1"}, timeout=120))
    assert hold.held.wait(60)
    httpx.post(f"{url}/pause_generation", json={"mode": "retract"}).raise_for_status()
    hold.release()
    wait_until(lambda: httpx.get(f"{url}/get_server_info").json()["waiting"] == 1)
    httpx.post(f"{url}/continue_generation").raise_for_status()
    thread.join(60)
    got, ref = out[0]["meta_info"], unpaused["meta_info"]
    assert got["input_token_logprobs"] == ref["input_token_logprobs"]
    assert len(got["input_token_logprobs"]) == len(prompt)
    assert tokens(out[0]) == tokens(unpaused)


def test_a_retract_requeues_the_batch_in_order_ahead_of_new_requests(
        http: httpx.Client, hold: StepHold) -> None:
    prompts = {f"r-{k}": [3 + k, 9, 4] for k in range(3)}
    refs = {rid: http.post("/generate", json=body(p, rid + "-ref")).json()
            for rid, p in prompts.items()}
    http.post("/pause_generation", json={"mode": "in_place"}).raise_for_status()
    runs = {}
    for queued, (rid, prompt) in enumerate(prompts.items(), 1):  # in this order
        runs[rid] = in_background(lambda p=prompt, r=rid: http.post(
            "/generate", json=body(p, r)))
        wait_until(lambda n=queued: http.get("/get_server_info").json()["waiting"] == n)
    hold.arm(2, count=3)
    http.post("/continue_generation").raise_for_status()
    assert hold.held.wait(60)
    http.post("/pause_generation", json={"mode": "retract"}).raise_for_status()
    late = in_background(lambda: http.post("/generate", json=body([8, 8], "late")))
    hold.release()
    wait_until(lambda: http.get("/get_server_info").json()["waiting"] == 4)
    steps_before = len(hold.steps)
    http.post("/continue_generation").raise_for_status()
    for thread, _ in [*runs.values(), late]:
        thread.join(60)
    readmitted = [rid for rid, _ in hold.steps[steps_before]]
    assert readmitted == ["r-0", "r-1", "r-2", "late"]
    for rid, (_, out) in runs.items():
        assert tokens(out[0]) == tokens(refs[rid])


def test_a_request_sent_while_paused_waits_and_is_served_after_continue(
        http: httpx.Client, hold: StepHold) -> None:
    unpaused = http.post("/generate", json=body([1, 2], "w-ref")).json()
    # Its answer is sent from inside the worker's last step, before the step hook counts
    # that step: the worker is idle (the hook has run) once it says nothing runs.
    wait_until(lambda: http.get("/get_server_info").json()["running"] == 0)
    http.post("/pause_generation", json={"mode": "in_place"}).raise_for_status()
    steps = len(hold.steps)
    thread, out = in_background(lambda: http.post("/generate", json=body([1, 2], "w-1")))
    wait_until(lambda: http.get("/get_server_info").json()["waiting"] == 1)
    assert thread.is_alive() and len(hold.steps) == steps  # accepted, not admitted
    http.post("/continue_generation").raise_for_status()
    thread.join(60)
    assert tokens(out[0]) == tokens(unpaused)
    assert out[0]["meta_info"]["finish_reason"]["type"] == "length"


def test_abort_request_ends_a_request_queued_while_paused(
        http: httpx.Client, hold: StepHold) -> None:
    http.post("/pause_generation", json={"mode": "retract"}).raise_for_status()
    thread, out = in_background(lambda: http.post("/generate", json=body([1, 2], "q-1")))
    wait_until(lambda: http.get("/get_server_info").json()["waiting"] == 1)
    assert http.post("/abort_request", json={"rid": "q-1"}).status_code == 200
    thread.join(60)
    meta = out[0]["meta_info"]
    assert meta["finish_reason"]["type"] == "abort" and meta["completion_tokens"] == 0
    assert http.get("/get_server_info").json()["waiting"] == 0


def test_a_version_change_during_an_in_place_pause_splits_the_spans(
        http: httpx.Client, hold: StepHold) -> None:
    unpaused = http.post("/generate", json=body([4, 4, 2], "v-ref")).json()
    hold.arm(4)
    thread, out = in_background(lambda: http.post("/generate", json=body([4, 4, 2], "v-1")))
    assert hold.held.wait(60)
    http.post("/pause_generation", json={"mode": "in_place"}).raise_for_status()
    changed = http.post("/update_weight_version",
                        json={"new_version": "v2", "abort_all_requests": False})
    assert changed.json() == {"success": True, "message": "Weight version updated to v2",
                              "new_version": "v2"}
    assert http.get("/get_server_info").json()["weight_version"] == "v2"
    assert http.get("/get_model_info").json()["weight_version"] == "v2"
    hold.release()
    http.post("/continue_generation").raise_for_status()
    thread.join(60)
    meta = out[0]["meta_info"]
    assert meta["weight_version"] == "v2"
    assert meta["weight_versions"] == [{"version": "default", "start": 0, "end": 4},
                                       {"version": "v2", "start": 4, "end": NEW}]
    assert tokens(out[0]) == tokens(unpaused)  # the label moved, not the weights


def test_a_streamed_generate_reports_the_version_spans_in_every_chunk(
        http: httpx.Client) -> None:
    http.post("/update_weight_version", json={"new_version": "step-3"}).raise_for_status()
    chunks = []
    with http.stream("POST", "/generate", json={**body([1], "s-1", new=3), "stream": True}
                     ) as response:
        for line in response.iter_lines():
            if line.startswith("data: {"):
                chunks.append(httpx.Response(200, content=line[6:]).json()["meta_info"])
    assert [m["weight_versions"] for m in chunks] == [
        [{"version": "step-3", "start": 0, "end": n}] for n in (1, 2, 3)]
    assert {m["weight_version"] for m in chunks} == {"step-3"}


def test_openai_routes_report_the_version_in_metadata(http: httpx.Client) -> None:
    http.post("/update_weight_version", json={"new_version": "v7"}).raise_for_status()
    chat = http.post("/v1/chat/completions", json={
        "model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
    assert chat.json()["metadata"] == {"weight_version": "v7"}
    completion = http.post("/v1/completions", json={"model": "m", "prompt": "hi",
                                                    "max_tokens": 2})
    assert completion.json()["metadata"] == {"weight_version": "v7"}


def test_a_version_update_aborts_running_requests_unless_told_not_to(
        http: httpx.Client, hold: StepHold) -> None:
    hold.arm(2)
    thread, out = in_background(lambda: http.post("/generate", json=body([9], "u-1")))
    assert hold.held.wait(60)
    http.post("/update_weight_version", json={"new_version": "v3"}).raise_for_status()
    hold.release()
    thread.join(60)
    meta = out[0]["meta_info"]
    assert meta["finish_reason"]["type"] == "abort" and meta["completion_tokens"] == 2
    assert meta["weight_versions"] == [{"version": "default", "start": 0, "end": 2}]
    assert meta["weight_version"] == "v3"
    info = http.get("/get_server_info").json()
    assert info["weight_version"] == "v3" and info["enable_deterministic_inference"] is True


@pytest.mark.parametrize("path,payload,param", [
    ("/pause_generation", {"mode": "sideways"}, "mode"),
    ("/pause_generation", {"mode": None}, "mode"),
    ("/update_weight_version", {}, "new_version"),
    ("/update_weight_version", {"new_version": ""}, "new_version"),
    ("/update_weight_version", {"new_version": 3}, "new_version"),
    ("/update_weight_version", {"new_version": "v", "abort_all_requests": "yes"},
     "abort_all_requests"),
])
def test_bad_control_bodies_are_400_in_sglangs_shape(
        http: httpx.Client, path: str, payload: dict[str, Any], param: str) -> None:
    answer = http.post(path, json=payload)
    assert answer.status_code == 400
    assert param in answer.json()["error"]["message"]
    info = http.get("/get_server_info").json()
    assert (info["paused"], info["weight_version"]) == (None, "default")


def test_an_empty_pause_body_means_abort_and_continue_takes_no_body(
        http: httpx.Client) -> None:
    assert http.post("/pause_generation").status_code == 200
    assert http.get("/get_server_info").json()["paused"] == "abort"
    assert http.post("/continue_generation").status_code == 200
    assert http.get("/get_server_info").json()["paused"] is None
