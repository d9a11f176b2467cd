"""Loading memory-maps safetensors into the engine's weights: bit-identical to building
them through a transformers model, and a warm start neither parses the GGUF again nor
imports transformers' model code."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.engine

torch = pytest.importorskip("torch")

from seedproxy.engine import load_model  # noqa: E402
from seedproxy.engine.checkpoint import SUPPORTED, read_hf_config  # noqa: E402
from seedproxy.engine.generator import Generator  # noqa: E402
from seedproxy.engine.llama import LlamaWeights  # noqa: E402
from seedproxy.engine.testing import tiny_hf_model, tiny_tokenizer  # noqa: E402
from tests.helpers.procs import SRC  # noqa: E402

ARCHS: dict[str, dict[str, Any]] = {
    "llama": {"tie_word_embeddings": True},  # no lm_head tensor in the file
    "qwen2": {},                             # q/k/v biases
    "qwen3": {},                             # per-head q/k norms
    "mistral": {"sliding_window": 48},
}


def _save(path: Path, model_type: str, *, full_config: bool) -> Any:
    hf = tiny_hf_model(model_type, seed=5, vocab_size=len(tiny_tokenizer()),
                       random_norms=True, **ARCHS[model_type])
    hf.save_pretrained(str(path))
    tiny_tokenizer().save_pretrained(str(path))
    if full_config:  # every key spelled out, as the GGUF cache writes it
        (path / "config.json").write_text(json.dumps(hf.config.to_dict()))
    return hf


def _tensors(w: LlamaWeights) -> list[Any]:
    """Every tensor, a packed projection as its product with a fixed probe."""
    gen = torch.Generator().manual_seed(0)
    out = [w.embed, w.final_norm, w.inv_freq]
    for layer in w.layers:
        out += [layer.input_norm, layer.post_norm]
        out += [t for t in (layer.q_norm, layer.k_norm, layer.qkv.bias) if t is not None]
    for lin in w.linears():
        out.append(lin(torch.randn(3, lin.in_features, generator=gen)))
    return out


def _logits(weights: LlamaWeights, model: Any, ids: list[int]) -> Any:
    runner = Generator(replace(model, weights=weights), max_batch=8, cache_mb=0).runner
    kv = runner.new_buffer(len(ids))
    return runner.forward(ids, list(range(len(ids))), [kv] * len(ids))


@pytest.mark.parametrize("full_config", [True, False], ids=["full-config", "diff-config"])
@pytest.mark.parametrize("model_type", sorted(ARCHS))
def test_mapped_weights_equal_transformers(tmp_path: Path, model_type: str,
                                           full_config: bool) -> None:
    from transformers import AutoModelForCausalLM

    _save(tmp_path, model_type, full_config=full_config)
    loaded = load_model(str(tmp_path))
    hf = AutoModelForCausalLM.from_pretrained(str(tmp_path), dtype=torch.float32)
    ref = LlamaWeights.from_hf(hf, max_positions=loaded.context_length)
    got = loaded.weights
    assert (got.num_heads, got.num_kv_heads, got.head_dim, got.intermediate, got.rms_eps,
            got.rope_scaling, got.max_positions, got.sliding_window) == (
        ref.num_heads, ref.num_kv_heads, ref.head_dim, ref.intermediate, ref.rms_eps,
        ref.rope_scaling, ref.max_positions, ref.sliding_window)
    mine, theirs = _tensors(got), _tensors(ref)
    assert len(mine) == len(theirs)
    assert all(torch.equal(a, b) for a, b in zip(mine, theirs, strict=True))
    ids = [3, 17, 250, 9, 1000, 4, 77, 31]
    assert torch.equal(_logits(got, loaded, ids), _logits(ref, loaded, ids))
    assert loaded.eos_token_ids == {tiny_tokenizer().eos_token_id}


@pytest.mark.parametrize("model_type", sorted(ARCHS))
def test_plain_config_reads_as_transformers_does(tmp_path: Path, model_type: str) -> None:
    hf = _save(tmp_path, model_type, full_config=True)
    cfg = read_hf_config(tmp_path, SUPPORTED[model_type])
    assert type(cfg).__name__ == "SimpleNamespace"  # the plain reading, not the class
    for key in ("num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
                "hidden_size", "intermediate_size", "rms_norm_eps", "max_position_embeddings",
                "tie_word_embeddings", "eos_token_id", "model_type"):
        assert getattr(cfg, key) == getattr(hf.config, key), key
    assert cfg.rope_parameters["rope_theta"] == hf.config.rope_parameters["rope_theta"]
    if model_type == "mistral":
        assert cfg.sliding_window == hf.config.sliding_window == 48


_PROBE = """
import json, sys
from seedproxy.engine import load_model
model = load_model(None)
loaded = sorted(m for m in sys.modules if m == "gguf" or m.startswith("gguf.")
                or m.startswith("transformers.models.") and ".modeling_" in m
                or m == "transformers.distributed.sharding_utils")
from transformers import AutoTokenizer
auto = AutoTokenizer.from_pretrained(model.source_dir)
text = "Hi 👋🏽, naïve 東京 <|im_end|>\\n\\t  x"
chat = [{"role": "user", "content": text}]
same = (type(auto) is type(model.tokenizer)
        and auto.encode(text) == model.tokenizer.encode(text)
        and auto.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
        == model.tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
        and auto.all_special_tokens == model.tokenizer.all_special_tokens)
print(json.dumps({"loaded": loaded, "same_tokenizer": same,
                  "eos": sorted(model.eos_token_ids)}))
"""


@pytest.mark.slow
def test_warm_start_reads_only_the_cache() -> None:
    """With the cache built, a load maps the safetensors: no GGUF parsing, no transformers
    model class (whose imports cost seconds), and the same tokenizer as AutoTokenizer's."""
    load_model(None)  # builds the cache if this machine has none yet
    env = {"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin", "HOME": str(Path.home()),
           **{k: v for k, v in os.environ.items() if k == "SEEDPROXY_CACHE_DIR"}}
    out = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True,
                         text=True, check=True, timeout=600)
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report == {"loaded": [], "same_tokenizer": True, "eos": [2]}


def test_the_gguf_key_is_hashed_once_per_unchanged_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A warm start does not read the whole GGUF to find its cache entry: the content
    key is remembered under the file's size and mtime, and a changed stamp hashes again."""
    from seedproxy.engine.model import _gguf_key

    monkeypatch.setenv("SEEDPROXY_CACHE_DIR", str(tmp_path / "cache"))
    gguf = tmp_path / "m.Q4_1.gguf"
    gguf.write_bytes(b"A" * 4096)
    first = _gguf_key(gguf)
    assert first == "m.Q4_1-" + hashlib.blake2b(b"A" * 4096, digest_size=8).hexdigest()
    stat = gguf.stat()
    gguf.write_bytes(b"B" * 4096)  # same size; the mtime put back: the memo answers
    os.utime(gguf, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert _gguf_key(gguf) == first
    os.utime(gguf, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))  # a new stamp: hashed
    assert _gguf_key(gguf) == "m.Q4_1-" + hashlib.blake2b(b"B" * 4096,
                                                         digest_size=8).hexdigest()
    copy = tmp_path / "reinstalled" / gguf.name  # another path, the same content
    copy.parent.mkdir()
    copy.write_bytes(b"B" * 4096)
    assert _gguf_key(copy) == _gguf_key(gguf)


_OMP_PROBE = """
import json, os
import seedproxy.engine  # before torch: sets the OpenMP wait policy's default
import torch
from seedproxy.engine import load_model
from seedproxy.engine.generator import Generator, GenRequest
from seedproxy.engine.params import SamplingParams
torch.set_num_threads(2)
model = load_model(None)
ids = model.tokenizer.apply_chat_template([{"role": "user", "content": "Write a poem"}],
                                          add_generation_prompt=True, tokenize=True,
                                          return_dict=False)
with torch.inference_mode():
    upd = Generator(model).run(GenRequest("r", list(ids), SamplingParams(
        max_new_tokens=16, temperature=0.8, seed=7, ignore_eos=True), return_logprob=True,
        top_logprobs_num=3), lambda u: None, lambda: False)
print(json.dumps({"policy": os.environ.get("OMP_WAIT_POLICY"), "ids": upd.output_ids,
                  "logprobs": upd.logprobs, "top": upd.top_logprobs}))
"""


@pytest.mark.slow
def test_openmp_threads_wait_passively_and_the_tokens_are_the_same_bits() -> None:
    """The engine makes OpenMP threads sleep between products (no spinning on a busy
    machine) unless told otherwise; the tokens and logprobs are those of spinning ones."""
    load_model(None)  # builds the cache if this machine has none yet
    base = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    base["PYTHONPATH"] = str(SRC)
    runs = {}
    for policy in (None, "ACTIVE"):
        env = base if policy is None else {**base, "OMP_WAIT_POLICY": policy}
        out = subprocess.run([sys.executable, "-c", _OMP_PROBE], env=env, capture_output=True,
                             text=True, check=True, timeout=600)
        runs[policy] = json.loads(out.stdout.strip().splitlines()[-1])
    passive, active = runs[None], runs["ACTIVE"]
    assert (passive["policy"], active["policy"]) == ("PASSIVE", "ACTIVE")
    assert len(passive["ids"]) == 16
    for key in ("ids", "logprobs", "top"):
        assert passive[key] == active[key], key
