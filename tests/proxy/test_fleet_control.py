"""The fleet's control plane through a real proxy in front of fake SGLang servers:
pause and continue, weight versions in the record, and the determinism preflight."""

from __future__ import annotations

import base64
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from seedproxy import derive_seed
from tests.conftest import Fake
from tests.helpers.fake_sglang import routed_experts_of, tokens_for
from tests.helpers.fleet import Fleet
from tests.helpers.procs import seedproxy_env, start_seedproxy
from tests.helpers.waiting import wait_until


def generate(proxy: str, session: str, prompt: list[int], max_new: int,
             headers: dict[str, str] | None = None) -> httpx.Response:
    body = {"input_ids": prompt, "sampling_params": {"max_new_tokens": max_new}}
    return httpx.post(f"{proxy}/sessions/{session}/generate", json=body, timeout=60,
                      headers=headers)


def test_a_request_made_while_paused_waits_and_is_served_after_continue(
    fake: Fake, start_proxy: Callable[..., str]
) -> None:
    proxy = start_proxy([fake.url])
    paused = httpx.post(f"{proxy}/fleet/pause", json={"mode": "in_place"}).json()
    assert paused["paused"] is True and paused["mode"] == "in_place"
    assert paused["upstreams"] == [
        {"url": fake.url, "ok": True, "status": 200, "error": None}
    ]
    assert fake.switches.control.calls[-1] == ("pause", {"mode": "in_place"})
    answers: list[httpx.Response] = []
    worker = threading.Thread(target=lambda: answers.append(generate(proxy, "p-1", [1, 2], 4)))
    worker.start()
    wait_until(lambda: httpx.get(f"{proxy}/fleet").json()["waiting"] == 1)
    assert fake.received == []  # held in the proxy, not sent
    resumed = httpx.post(f"{proxy}/fleet/continue").json()
    assert resumed["paused"] is False and resumed["upstreams"][0]["ok"] is True
    worker.join(30)
    assert answers[0].status_code == 200
    seed = derive_seed("p-1", 0)
    assert answers[0].json()["output_ids"] == tokens_for([1, 2], seed, 1.0, 4)


def test_a_pause_past_its_bound_is_503_with_retry_after_in_openais_shape(
    fake: Fake, start_proxy: Callable[..., str]
) -> None:
    proxy = start_proxy([fake.url], pause_timeout_s=0.2)
    httpx.post(f"{proxy}/fleet/pause", json={"mode": "retract"}).raise_for_status()
    answer = generate(proxy, "p-2", [1], 2)
    assert answer.status_code == 503
    assert answer.headers["retry-after"] == "1"
    error = answer.json()["error"]
    assert "paused (retract)" in error["message"] and error["type"] == "upstream_error"
    httpx.post(f"{proxy}/fleet/continue").raise_for_status()
    assert generate(proxy, "p-2", [1], 2).status_code == 200


def test_a_bad_pause_mode_is_a_400(fake: Fake, start_proxy: Callable[..., str]) -> None:
    proxy = start_proxy([fake.url])
    answer = httpx.post(f"{proxy}/fleet/pause", json={"mode": "sideways"})
    assert answer.status_code == 400 and "error" in answer.json()
    assert fake.switches.control.calls == []


def test_fleet_routes_need_the_admin_key(fake: Fake, start_proxy: Callable[..., str]) -> None:
    proxy = start_proxy([fake.url], admin_key="k" * 16)
    for method, path in [("GET", "/fleet"), ("POST", "/fleet/continue")]:
        assert httpx.request(method, proxy + path).status_code == 401
    assert httpx.post(f"{proxy}/fleet/pause", json={"mode": "abort"}).status_code == 401
    assert fake.switches.control.calls == []
    ok = httpx.get(f"{proxy}/fleet", headers={"authorization": "Bearer " + "k" * 16})
    assert ok.status_code == 200 and ok.json()["upstreams"][0]["deterministic"] is True


def test_weight_versions_are_recorded_at_dispatch_and_per_token(
    fake: Fake, start_proxy: Callable[..., str]
) -> None:
    proxy = start_proxy([fake.url])
    state = httpx.get(f"{proxy}/fleet").json()
    assert state["upstreams"][0]["weight_version"] == "default"
    assert generate(proxy, "w-1", [5], 3).status_code == 200
    bumped = httpx.post(f"{proxy}/fleet/weight_version", json={"version": "v2"}).json()
    assert bumped["upstreams"][0]["ok"] is True
    assert fake.switches.control.calls[-1] == (
        "weight_version", {"new_version": "v2", "abort_all_requests": False}
    )
    after = generate(proxy, "w-1", [5], 3).json()
    seed = derive_seed("w-1", 1)
    assert after["output_ids"] == tokens_for([5], seed, 1.0, 3, "v2")
    assert after["output_ids"] != tokens_for([5], seed, 1.0, 3)
    trajectory = httpx.get(f"{proxy}/sessions/w-1/trajectory").json()
    first, second = trajectory["interactions"]
    assert (first["dispatch_weight_version"], first["weight_version"]) == ("default", "default")
    assert first["weight_versions"] == [{"version": "default", "start": 0, "end": 3}]
    assert (second["dispatch_weight_version"], second["weight_version"]) == ("v2", "v2")
    assert second["weight_versions"] == [{"version": "v2", "start": 0, "end": 3}]


def test_chat_records_the_version_from_the_answers_metadata(
    fake: Fake, start_proxy: Callable[..., str]
) -> None:
    proxy = start_proxy([fake.url])
    fake.switches.control.version = "step-7"
    answer = httpx.post(f"{proxy}/sessions/c-1/v1/chat/completions", json={
        "model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
    assert answer.status_code == 200
    record = httpx.get(f"{proxy}/sessions/c-1/trajectory").json()["interactions"][0]
    assert record["weight_version"] == "step-7"


def run_paused_load(fake: Fake, proxy: str, mode: str, *, bump: str | None,
                    count: int = 32, new: int = 12,
                    admin: str | None = None) -> dict[int, dict[str, Any]]:
    """``count`` rollouts (even ones streamed) each stop at token 3 (the fake's
    checkpoint); the fleet pauses in ``mode``, the version moves to ``bump``, the fleet
    continues, each through ``admin`` (another replica; default ``proxy``). Returns
    each rollout's final answer."""
    control = fake.switches.control
    admin = admin or proxy
    control.hold_at = 3
    finals: dict[int, dict[str, Any]] = {}

    def rollout(i: int) -> None:
        body = {"input_ids": [i, i + 1], "sampling_params": {"max_new_tokens": new},
                "stream": i % 2 == 0}
        url = f"{proxy}/sessions/r-{i}/generate"
        if not body["stream"]:
            finals[i] = httpx.post(url, json=body, timeout=60).json()
            return
        lengths = []
        with httpx.stream("POST", url, json=body, timeout=60) as response:
            for line in response.iter_lines():
                if line.startswith("data: {"):
                    finals[i] = httpx.Response(200, content=line[6:]).json()
                    lengths.append(len(finals[i]["output_ids"]))
        assert lengths == sorted(lengths)  # one uninterrupted, growing answer

    workers = [threading.Thread(target=rollout, args=(i,)) for i in range(count)]
    for worker in workers:
        worker.start()
    wait_until(lambda: control.held == count)
    httpx.post(f"{admin}/fleet/pause", json={"mode": mode}).raise_for_status()
    control.release.set()
    if bump is not None:
        httpx.post(f"{admin}/fleet/weight_version",
                   json={"version": bump, "abort_all_requests": False}).raise_for_status()
    wait_until(lambda: not control.running if mode == "abort" else True)
    httpx.post(f"{admin}/fleet/continue").raise_for_status()
    for worker in workers:
        worker.join(60)
    return finals


@pytest.mark.parametrize("mode", ["abort", "in_place", "retract"])
def test_a_pause_and_a_version_bump_mid_generation_gives_complete_answers_with_spans(
    mode: str, fake: Fake, start_proxy: Callable[..., str]
) -> None:
    """Every answer is complete, every index is used once, and the spans say default
    for positions 0..3 and v2 after, each token the one its version gives there."""
    proxy = start_proxy([fake.url])
    new = 12
    finals = run_paused_load(fake, proxy, mode, bump="v2", new=new)
    for i in range(32):
        final = finals[i]
        assert final["meta_info"]["finish_reason"]["type"] == "length"
        ids, spans = final["output_ids"], final["meta_info"]["weight_versions"]
        assert spans == [{"version": "default", "start": 0, "end": 3},
                         {"version": "v2", "start": 3, "end": new}]
        assert final["meta_info"]["completion_tokens"] == new
        assert final["meta_info"]["prompt_tokens"] == 2
        seed = derive_seed(f"r-{i}", 0)
        prompt = [i, i + 1]
        assert ids[:3] == tokens_for(prompt, seed, 1.0, 3)
        assert ids[3:] == tokens_for(prompt + ids[:3], seed, 1.0, new - 3, "v2")
        record = httpx.get(f"{proxy}/sessions/r-{i}/trajectory").json()["interactions"]
        assert [r["request_index"] for r in record] == [0]
        assert record[0]["completion_token_ids"] == ids
        assert record[0]["prompt_token_ids"] == prompt
        assert record[0]["weight_versions"] == spans
        assert (record[0]["dispatch_weight_version"], record[0]["weight_version"]) == (
            "default", "v2")
    if mode == "abort":  # each rollout was aborted once and resubmitted from token 3
        resubmitted = [b for b in fake.received if len(b["input_ids"]) == 5]
        assert len(resubmitted) == 32
        assert all(b["sampling_params"]["max_new_tokens"] == new - 3 for b in resubmitted)


def test_an_abort_pause_without_a_version_change_gives_the_unpaused_tokens(
    fake: Fake, start_proxy: Callable[..., str]
) -> None:
    proxy = start_proxy([fake.url])
    finals = run_paused_load(fake, proxy, "abort", bump=None, count=4)
    for i in range(4):
        seed = derive_seed(f"r-{i}", 0)
        assert finals[i]["output_ids"] == tokens_for([i, i + 1], seed, 1.0, 12)
        # two attempts, both on the default weights: the resume point stays visible
        assert finals[i]["meta_info"]["weight_versions"] == [
            {"version": "default", "start": 0, "end": 3},
            {"version": "default", "start": 3, "end": 12},
        ]


def test_an_upstream_that_turns_nondeterministic_is_refused_until_fixed(
    fake: Fake, start_proxy: Callable[..., str]
) -> None:
    proxy = start_proxy([fake.url])
    assert generate(proxy, "d-1", [1], 2).status_code == 200
    fake.switches.control.server_info["enable_deterministic_inference"] = False
    state = httpx.get(f"{proxy}/fleet").json()["upstreams"][0]
    assert state["deterministic"] is False and state["refused"] is True
    assert "--enable-deterministic-inference" in state["problems"][0]
    sent = len(fake.received)
    refused = generate(proxy, "d-1", [1], 2)
    assert refused.status_code == 503
    assert "determinism preflight" in refused.json()["error"]["message"]
    assert len(fake.received) == sent
    fake.switches.control.server_info["enable_deterministic_inference"] = True
    assert httpx.get(f"{proxy}/fleet").json()["upstreams"][0]["refused"] is False
    assert generate(proxy, "d-1", [1], 2).status_code == 200


def test_no_deterministic_mode_does_not_refuse(fake: Fake, start_proxy: Callable[..., str]) -> None:
    fake.switches.control.server_info["enable_deterministic_inference"] = False
    proxy = start_proxy([fake.url], deterministic=False)
    assert generate(proxy, "n-1", [1], 2).status_code == 200


def test_serve_refuses_a_nondeterministic_upstream_with_one_line_naming_it(fake: Fake) -> None:
    fake.switches.control.server_info["speculative_algorithm"] = "EAGLE"
    proc = start_seedproxy("serve", "--upstream", fake.url, "--port", "0",
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, err = proc.communicate(timeout=60)
    lines = err.decode().strip().splitlines()
    assert proc.returncode == 2, lines
    assert len(lines) == 1
    assert fake.url in lines[0] and "--speculative-algorithm" in lines[0]
    assert "--allow-nondeterministic-upstream" in lines[0]


def test_doctor_reports_each_upstream(fake: Fake) -> None:
    def doctor() -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [sys.executable, "-m", "seedproxy", "doctor", "--upstream", fake.url],
            capture_output=True, timeout=60, env=seedproxy_env(),
        )

    good = doctor()
    assert good.returncode == 0
    assert good.stdout.decode().strip() == f"{fake.url}: deterministic (weight version default)"
    fake.switches.control.server_info["sampling_backend"] = "flashinfer"
    bad = doctor()
    assert bad.returncode == 1
    out = bad.stdout.decode()
    assert "NOT DETERMINISTIC" in out and "--sampling-backend pytorch" in out


@pytest.mark.parametrize("mode", ["abort", "in_place", "retract"])
def test_pause_reaches_every_upstream(mode: str, start_proxy: Callable[..., str]) -> None:
    fleet = Fleet(2)
    try:
        proxy = start_proxy(fleet.urls)
        state = httpx.post(f"{proxy}/fleet/pause", json={"mode": mode}).json()
        assert sorted(u["url"] for u in state["upstreams"]) == sorted(fleet.urls)
        assert all(u["ok"] for u in state["upstreams"])
        for member in fleet.servers:
            assert member.switches.control.calls == [("pause", {"mode": mode})]
        httpx.post(f"{proxy}/fleet/continue").raise_for_status()
    finally:
        fleet.close()


def test_verify_passes_on_a_clean_session_and_names_the_first_divergence(
    fake: Fake, start_proxy: Callable[..., str]
) -> None:
    proxy = start_proxy([fake.url])
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
    for body in (chat, {**chat, "stream": True}, {**chat, "n": 2}):
        assert httpx.post(f"{proxy}/sessions/v-1/v1/chat/completions", json=body,
                          timeout=30).status_code == 200
    assert generate(proxy, "v-1", [3, 4], 6).status_code == 200
    clean = httpx.post(f"{proxy}/sessions/v-1/verify", timeout=60).json()
    assert clean == {"session_id": "v-1", "ok": True, "checked": 4, "skipped": 0,
                     "first_divergence": None}

    recorded = httpx.get(f"{proxy}/sessions/v-1/trajectory").json()["interactions"]
    fake.switches.flip_at = 2
    report = httpx.post(f"{proxy}/sessions/v-1/verify", timeout=60).json()
    assert report["ok"] is False and report["checked"] == 1
    divergence = report["first_divergence"]
    assert (divergence["request_index"], divergence["choice"], divergence["position"]) == (0, 0, 2)
    expected_token = recorded[0]["completion_token_ids"][2]
    assert divergence["expected"]["token_id"] == expected_token
    assert divergence["got"]["token_id"] not in (None, expected_token)

    cli = subprocess.run(
        [sys.executable, "-m", "seedproxy", "verify", "--url", proxy, "--session", "v-1"],
        capture_output=True, timeout=60, env=seedproxy_env(),
    )
    assert cli.returncode == 1
    assert "DIVERGED at request_index 0 (i0), choice 0, position 2" in cli.stdout.decode()
    fake.switches.flip_at = None
    ok = subprocess.run(
        [sys.executable, "-m", "seedproxy", "verify", "--url", proxy, "--session", "v-1"],
        capture_output=True, timeout=60, env=seedproxy_env(),
    )
    assert ok.returncode == 0 and "verified 4 interactions" in ok.stdout.decode()


def test_verify_of_an_unknown_session_is_404(fake: Fake, start_proxy: Callable[..., str]) -> None:
    proxy = start_proxy([fake.url])
    answer = httpx.post(f"{proxy}/sessions/nope/verify")
    assert answer.status_code == 404 and "error" in answer.json()


@pytest.mark.parametrize("stream", [False, True])
def test_routed_experts_are_captured_compactly_and_exported(
    stream: bool, fake: Fake, start_proxy: Callable[..., str]
) -> None:
    proxy = start_proxy([fake.url], capture_routed_experts=True)
    body = {"input_ids": [11, 12, 13], "sampling_params": {"max_new_tokens": 4},
            "stream": stream}
    answer = httpx.post(f"{proxy}/sessions/moe-1/generate", json=body, timeout=30)
    assert answer.status_code == 200
    assert fake.received[-1]["return_routed_experts"] is True
    assert "routed_experts" not in answer.text  # the client did not ask
    record = httpx.get(f"{proxy}/sessions/moe-1/trajectory").json()["interactions"][0]
    sequence = [11, 12, 13, *record["completion_token_ids"]]
    routing = record["routed_experts"]
    assert routing["dtype"] == "uint8" and routing["shape"] == [len(sequence) - 1, 4]
    stored = list(base64.b64decode(routing["data"]))
    assert stored == routed_experts_of(sequence)
    exported = httpx.post(f"{proxy}/trajectories/export",
                          json={"session_ids": ["moe-1"]}).json()["trajectories"][0]
    assert exported["interactions"][0]["routed_experts"] == routing


def test_routed_experts_reach_a_client_that_asks(
    fake: Fake, start_proxy: Callable[..., str]
) -> None:
    proxy = start_proxy([fake.url], capture_routed_experts=True)
    body = {"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 2},
            "return_routed_experts": True}
    meta = httpx.post(f"{proxy}/sessions/moe-2/generate", json=body).json()["meta_info"]
    assert isinstance(meta["routed_experts"], str)


def test_chat_passthrough_in_an_abort_pause_is_sent_again_whole_or_ends_aborted_if_streamed(
    fake: Fake, start_proxy: Callable[..., str]
) -> None:
    """Without token ids a chat answer cannot be continued: a non-streamed one is sent
    again whole with its seed (the unpaused answer); a stream that began ends with
    finish_reason abort, and the record says the same."""
    control = fake.switches.control
    control.hold_at = 2
    proxy = start_proxy([fake.url])
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 6}
    results: dict[str, Any] = {}

    def whole() -> None:
        results["whole"] = httpx.post(f"{proxy}/sessions/cp-1/v1/chat/completions",
                                      json=chat, timeout=60).json()

    def streamed() -> None:
        with httpx.stream("POST", f"{proxy}/sessions/cp-2/v1/chat/completions",
                          json={**chat, "stream": True}, timeout=60) as response:
            results["stream"] = [line for line in response.iter_lines() if line]

    workers = [threading.Thread(target=whole), threading.Thread(target=streamed)]
    for worker in workers:
        worker.start()
    wait_until(lambda: control.held == 2)
    httpx.post(f"{proxy}/fleet/pause", json={"mode": "abort"}).raise_for_status()
    control.release.set()
    wait_until(lambda: not control.running)
    httpx.post(f"{proxy}/fleet/continue").raise_for_status()
    for worker in workers:
        worker.join(60)
    answer = results["whole"]["choices"][0]
    assert answer["finish_reason"] == "length"
    unpaused = httpx.post(f"{proxy}/sessions/cp-3/v1/chat/completions",
                          json={**chat, "seed": derive_seed("cp-1", 0)}).json()
    assert answer["message"]["content"] == unpaused["choices"][0]["message"]["content"]
    assert results["stream"][-1] == "data: [DONE]"
    reasons = [httpx.Response(200, content=line[6:]).json()["choices"][0]["finish_reason"]
               for line in results["stream"][:-1]
               if '"choices":[{' in line]
    assert reasons[-1] == "abort"
    record = httpx.get(f"{proxy}/sessions/cp-2/trajectory").json()["interactions"][0]
    assert record["finish_reason"] == "abort"
    assert len(record["completion_token_ids"]) == 2  # what the client saw
