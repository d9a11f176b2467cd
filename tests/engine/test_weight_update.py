"""SGLang's ``/update_weights_from_disk`` on the real engine: a checkpoint saved here
(safetensors, the tiny Llama's architecture and shapes, other weights) is loaded in
place; what is sampled after equals a fresh engine started on that checkpoint, a
checkpoint of another shape is refused with the old weights answering exactly as
before, and requests paused mid-generation follow the pause mode across the swap."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from safetensors.torch import load_file, save_file

from seedproxy.engine import RunningEngine, start_engine_thread
from seedproxy.engine.linear import rows_invariant
from seedproxy.engine.model import load_model, prepare_update
from seedproxy.engine.testing import engine_model, tiny_hf_model, tiny_model, tiny_tokenizer
from tests.helpers.step_hold import StepHold
from tests.helpers.waiting import wait_until

NEW = 12
PROMPT = list(range(40, 60))  # longer than a step's rows: the prefill takes steps


def save_checkpoint(path: Path, seed: int, **overrides: Any) -> Path:
    """A Hugging Face folder of the tiny Llama (``tiny_model``'s config) with the
    weights of ``seed``, as a trainer saves it (safetensors, config, tokenizer)."""
    tok = tiny_tokenizer()
    hf = tiny_hf_model("llama", seed, vocab_size=len(tok), bos_token_id=tok.bos_token_id,
                       eos_token_id=tok.eos_token_id, pad_token_id=tok.eos_token_id,
                       **overrides)
    hf.save_pretrained(str(path))
    tok.save_pretrained(str(path))
    assert (path / "model.safetensors").is_file()
    return path


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_checkpoint(tmp_path_factory.mktemp("ckpt") / "step-1", seed=1)


@pytest.fixture(scope="module")
def fresh(checkpoint: Path) -> Iterator[str]:
    """An engine started on the checkpoint."""
    running = start_engine_thread(load_model(str(checkpoint)), max_batch=4)
    yield running.url
    running.stop()


@pytest.fixture(scope="module")
def hold() -> StepHold:
    return StepHold()


@pytest.fixture
def engine(hold: StepHold) -> Iterator[RunningEngine]:
    """An engine of its own on ``tiny_model()`` (the shared one must keep its weights)."""
    hold.reset()
    running = start_engine_thread(tiny_model(), max_batch=4, on_step=hold)
    yield running
    hold.release()
    running.stop()


def body(prompt: list[int], rid: str, new: int = NEW, seed: int = 7) -> dict[str, Any]:
    return {"input_ids": prompt, "rid": rid, "return_logprob": True,
            "sampling_params": {"max_new_tokens": new, "ignore_eos": True,
                                "sampling_seed": seed, "temperature": 1.0}}


def generate(url: str, prompt: list[int], rid: str, **kw: Any) -> dict[str, Any]:
    answer = httpx.post(f"{url}/generate", json=body(prompt, rid, **kw), timeout=120)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def tokens(answer: dict[str, Any]) -> tuple[list[int], list[float]]:
    pairs = answer["meta_info"]["output_token_logprobs"]
    return answer["output_ids"], [lp for lp, _, _ in pairs]


def load(url: str, **fields: Any) -> httpx.Response:
    return httpx.post(f"{url}/update_weights_from_disk", json=fields, timeout=120)


def test_loaded_weights_sample_what_a_fresh_engine_on_them_samples(
        engine: RunningEngine, checkpoint: Path, fresh: str) -> None:
    before = generate(engine.url, PROMPT, "before")  # its prompt is in the prefix cache now
    loaded = load(engine.url, model_path=str(checkpoint), weight_version="step-1")
    assert loaded.status_code == 200
    assert loaded.json() == {"success": True, "message": "Succeeded to update model weights.",
                             "num_paused_requests": 0}
    after = generate(engine.url, PROMPT, "after")
    assert tokens(after)[0] != tokens(before)[0]  # same seed, new weights
    assert tokens(after) == tokens(generate(fresh, PROMPT, "fresh"))  # bit for bit
    assert after["meta_info"]["cached_tokens"] == 0  # the old weights' keys were dropped
    assert after["meta_info"]["weight_version"] == "step-1"
    info = httpx.get(f"{engine.url}/get_model_info").json()
    assert (info["weight_version"], info["model_path"]) == ("step-1", str(checkpoint))
    assert info["tokenizer_path"] == "tiny-random-llama:seed=0"  # the tokenizer stays
    assert engine.server.config.app.state.engine.model.source_dir == str(checkpoint)


def drop_tensor(folder: Path) -> Path:
    state = load_file(str(folder / "model.safetensors"))
    del state["model.layers.1.mlp.down_proj.weight"]
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


@pytest.mark.parametrize("make,says", [
    (lambda p: save_checkpoint(p, 1, intermediate_size=96), "intermediate_size: 96"),
    (lambda p: save_checkpoint(p, 1, num_hidden_layers=3), "layers: 3"),
    (lambda p: save_checkpoint(p, 1, rms_norm_eps=1e-6), "rms_norm_eps: 1e-06"),
    (lambda p: drop_tensor(save_checkpoint(p, 1)), "model.layers.1.mlp.down_proj.weight"),
    (lambda p: p, "no config.json"),
])
def test_a_checkpoint_that_does_not_fit_is_refused_and_the_old_weights_stay(
        make: Any, says: str, engine: RunningEngine, tmp_path: Path) -> None:
    before = generate(engine.url, PROMPT, "before")
    folder = make(tmp_path / "bad")
    refused = load(engine.url, model_path=str(folder), weight_version="bad")
    assert refused.status_code == 400
    answer = refused.json()
    assert (answer["success"], answer["num_paused_requests"]) == (False, 0)
    assert says in answer["message"] and "not" in answer["message"], answer["message"]
    again = generate(engine.url, PROMPT, "again")
    assert tokens(again) == tokens(before)
    assert again["meta_info"]["weight_version"] == "default"


def test_another_architecture_and_bad_bodies_are_refused(
        engine: RunningEngine, tmp_path: Path) -> None:
    qwen = tiny_hf_model("qwen3", seed=1, vocab_size=len(tiny_tokenizer()))
    qwen.save_pretrained(str(tmp_path / "qwen3"))
    refused = load(engine.url, model_path=str(tmp_path / "qwen3")).json()
    assert refused["success"] is False and "Qwen3ForCausalLM" in refused["message"]
    unknown = load(engine.url, model_path=str(tmp_path / "qwen3"), load_format="gguf").json()
    assert "load_format 'gguf' is not supported" in unknown["message"]
    for bad in [{}, {"model_path": 3}, {"model_path": "x", "abort_all_requests": "yes"},
                {"model_path": "x", "weight_version": ""}]:
        answer = load(engine.url, **bad)
        assert answer.status_code == 400 and "message" in answer.json()["error"], bad


def held_request(url: str, hold: StepHold, at: int) -> tuple[threading.Thread, list[Any]]:
    """A request running on ``url``, the worker held once it has ``at`` tokens."""
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(generate(url, PROMPT, "held")))
    hold.arm(at)
    thread.start()
    assert hold.held.wait(60)
    return thread, out


@pytest.mark.parametrize("mode", ["in_place", "retract"])
def test_a_request_paused_across_the_load_goes_on_under_the_new_weights(
        mode: str, engine: RunningEngine, hold: StepHold, checkpoint: Path,
        fresh: str) -> None:
    at = 4
    old = generate(engine.url, PROMPT, "old")
    thread, out = held_request(engine.url, hold, at)
    httpx.post(f"{engine.url}/pause_generation", json={"mode": mode}).raise_for_status()
    hold.release()
    if mode == "retract":
        wait_until(lambda: httpx.get(f"{engine.url}/get_server_info").json()["waiting"] == 1)
    loaded = load(engine.url, model_path=str(checkpoint), weight_version="step-1").json()
    assert loaded["success"] is True and loaded["num_paused_requests"] == 1
    assert thread.is_alive()
    httpx.post(f"{engine.url}/continue_generation").raise_for_status()
    thread.join(60)
    ids, logprobs = tokens(out[0])
    assert (ids[:at], logprobs[:at]) == (tokens(old)[0][:at], tokens(old)[1][:at])
    assert out[0]["meta_info"]["weight_versions"] == [
        {"version": "default", "start": 0, "end": at},
        {"version": "step-1", "start": at, "end": NEW}]
    if mode == "retract":  # prompt + tokens so far were prefilled again on the new weights
        rest = generate(fresh, PROMPT + ids[:at], "rest", new=NEW - at)
        assert (ids[at:], logprobs[at:]) == tokens(rest)


def test_a_load_while_running_waits_for_the_running_requests(
        engine: RunningEngine, hold: StepHold, checkpoint: Path, fresh: str) -> None:
    old = generate(engine.url, PROMPT, "old")
    thread, out = held_request(engine.url, hold, 2)
    loaded: list[httpx.Response] = []
    loader = threading.Thread(target=lambda: loaded.append(
        load(engine.url, model_path=str(checkpoint))))
    loader.start()
    worker = engine.server.config.app.state.engine.worker
    wait_until(lambda: worker.swap_pending)  # read and checked, waiting for the batch
    hold.release()
    thread.join(60)
    loader.join(60)
    assert tokens(out[0]) == tokens(old)  # all of it on the old weights
    assert loaded[0].json()["success"] is True
    assert tokens(generate(engine.url, PROMPT, "new")) == tokens(generate(fresh, PROMPT, "f"))


def test_a_fleet_sync_where_one_engine_refuses_stays_paused_and_names_it(
        engine: RunningEngine, checkpoint: Path, fresh: str,
        start_proxy: Callable[..., str]) -> None:
    """Two engines behind a proxy; the second runs a model of another shape, so the
    checkpoint fits the first only."""
    tok = tiny_tokenizer()
    other = engine_model(tiny_hf_model("llama", 0, vocab_size=len(tok), intermediate_size=96,
                                       eos_token_id=tok.eos_token_id), tok, "other")
    second = start_engine_thread(other, max_batch=4)
    try:
        proxy = start_proxy([engine.url, second.url])
        answer = httpx.post(f"{proxy}/fleet/update_weights", timeout=120,
                            json={"model_path": str(checkpoint), "version": "step-1"})
        assert answer.status_code == 502
        body = answer.json()
        assert second.url in body["error"]["message"]
        assert engine.url not in body["error"]["message"]
        assert "intermediate_size" in body["error"]["message"]
        assert (body["paused"], body["mode"]) == (True, "in_place")
        for url, version in [(engine.url, "step-1"), (second.url, "default")]:
            info = httpx.get(f"{url}/get_server_info").json()
            assert (info["paused"], info["weight_version"]) == ("in_place", version)
        assert httpx.post(f"{proxy}/fleet/continue").json()["paused"] is False
        assert httpx.get(f"{second.url}/get_server_info").json()["paused"] is None
    finally:
        second.stop()


def test_a_fleet_sync_through_the_proxy_samples_the_new_weights(
        engine: RunningEngine, checkpoint: Path, fresh: str,
        start_proxy: Callable[..., str]) -> None:
    proxy = start_proxy([engine.url])
    url = f"{proxy}/sessions/sync-1/generate"
    before = httpx.post(url, json=body(PROMPT, "b"), timeout=120).json()
    answer = httpx.post(f"{proxy}/fleet/update_weights", timeout=120,
                        json={"model_path": str(checkpoint), "version": "step-1"})
    assert answer.status_code == 200, answer.text
    assert answer.json()["upstreams"][0]["answer"]["success"] is True
    after = httpx.post(url, json=body(PROMPT, "a"), timeout=120).json()
    assert tokens(after) != tokens(before)
    assert tokens(after) == tokens(generate(fresh, PROMPT, "f"))
    record = httpx.get(f"{proxy}/sessions/sync-1/trajectory").json()["interactions"]
    assert [r["weight_version"] for r in record] == ["default", "step-1"]
    assert record[1]["completion_token_ids"] == after["output_ids"]


def test_the_row_invariance_probe_runs_on_the_new_weights(checkpoint: Path) -> None:
    """The runner swapped in was probed on the checkpoint's own matrices: its padding
    follows their probe, and it computes with them, not the running model's."""
    model = tiny_model()
    runner = prepare_update(str(checkpoint), "safetensors", model, max_rows=4)
    assert runner.w is not model.weights
    assert runner.pad == (not rows_invariant(runner.w.linears(), 4))
    assert not torch.equal(runner.w.embed, model.weights.embed)
