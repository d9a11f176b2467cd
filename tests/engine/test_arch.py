"""Each supported architecture matches transformers' own model; others are refused early."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.engine

torch = pytest.importorskip("torch")

from seedproxy.engine import EngineError, load_model, start_engine_thread  # noqa: E402
from seedproxy.engine.generator import Generator  # noqa: E402
from seedproxy.engine.testing import engine_model, tiny_hf_model, tiny_tokenizer  # noqa: E402

POSITIONS = 300
# float32 noise: the engine fuses q/k/v and gate/up and uses another GEMM kernel than
# transformers, so logits of size ~10 differ in the last bits (measured: < 2e-5).
TOLERANCE = 1e-4

ARCHS: dict[str, dict[str, Any]] = {
    "llama": {},
    "qwen2": {},                          # q/k/v biases
    "qwen3": {},                          # per-head q/k RMSNorm
    "mistral": {"sliding_window": 48},    # a window far shorter than the sequence
}


def engine_logits(model: Any, ids: list[int]) -> Any:
    """The engine's logits at every position, prefilling 8 rows per forward call."""
    runner = Generator(model, max_batch=8, cache_mb=0).runner
    kv = runner.new_buffer(len(ids))
    rows = []
    with torch.inference_mode():
        for start in range(0, len(ids), 8):
            pos = list(range(start, min(start + 8, len(ids))))
            rows.append(runner.forward([ids[p] for p in pos], pos, [kv] * len(pos)))
    return torch.cat(rows)


@pytest.mark.parametrize("model_type", sorted(ARCHS))
def test_logits_match_transformers(model_type: str) -> None:
    hf = tiny_hf_model(model_type, seed=3, vocab_size=512, random_norms=True,
                       **ARCHS[model_type])
    if model_type == "qwen2":
        assert hf.model.layers[0].self_attn.q_proj.bias is not None
    if model_type == "qwen3":
        assert hf.model.layers[0].self_attn.q_norm is not None
    model = engine_model(hf, tiny_tokenizer(), f"tiny-{model_type}")
    ids = torch.randint(0, 512, (POSITIONS,), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        ref = hf(ids[None]).logits[0].float()
    got = engine_logits(model, ids.tolist())
    assert got.shape == ref.shape
    assert float((got - ref).abs().max()) < TOLERANCE
    assert torch.equal(got.argmax(-1), ref.argmax(-1))


def test_mistral_window_is_applied() -> None:
    """Without the window the logits after position 48 would differ: the test can fail."""
    hf = tiny_hf_model("mistral", seed=3, vocab_size=512, random_norms=True,
                       sliding_window=48)
    full = tiny_hf_model("mistral", seed=3, vocab_size=512, random_norms=True,
                         sliding_window=None)
    ids = torch.randint(0, 512, (100,), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        a, b = hf(ids[None]).logits[0], full(ids[None]).logits[0]
    assert float((a[60:] - b[60:]).abs().max()) > 1e-3
    got = engine_logits(engine_model(hf, tiny_tokenizer(), "m"), ids.tolist())
    assert float((got - a).abs().max()) < TOLERANCE


def save_folder(path: Path, model_type: str) -> Path:
    hf = tiny_hf_model(model_type, seed=1, vocab_size=len(tiny_tokenizer()))
    hf.save_pretrained(str(path))
    tiny_tokenizer().save_pretrained(str(path))
    return path


def test_folder_loads_with_its_architecture(tmp_path: Path) -> None:
    model = load_model(str(save_folder(tmp_path / "q3", "qwen3")))
    assert (model.arch.model_type, model.arch.hf_class) == ("qwen3", "Qwen3ForCausalLM")
    assert model.weights.layers[0].q_norm is not None
    running = start_engine_thread(model, max_batch=2)
    try:
        info = httpx.get(running.url + "/get_model_info").json()
        assert info["model_type"] == "qwen3"
        assert info["architectures"] == ["Qwen3ForCausalLM"]
        models = httpx.get(running.url + "/v1/models").json()
        assert models["data"][0]["id"] == "q3"
    finally:
        running.stop()


def test_unsupported_folder_refused_before_weights(tmp_path: Path) -> None:
    # No weight file at all: reading one would fail with another message.
    (tmp_path / "config.json").write_text(json.dumps(
        {"model_type": "gemma", "architectures": ["GemmaForCausalLM"]}))
    with pytest.raises(EngineError) as err:
        load_model(str(tmp_path))
    msg = str(err.value)
    assert "'gemma'" in msg and "llama, mistral, qwen2, qwen3" in msg and "\n" not in msg


@pytest.mark.parametrize("cfg", [{"model_type": "qwen2", "use_sliding_window": True},
                                 {"model_type": "llama", "mlp_bias": True}])
def test_unimplemented_features_refused(tmp_path: Path, cfg: dict[str, Any]) -> None:
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(EngineError, match="unsupported architecture"):
        load_model(str(tmp_path))


def test_unsupported_gguf_refused_before_dequantising(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gguf = pytest.importorskip("gguf")
    path = tmp_path / "tiny-gemma.gguf"
    writer = gguf.GGUFWriter(str(path), "gemma")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", torch.zeros(4, 4).numpy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    cache = tmp_path / "cache"
    monkeypatch.setenv("SEEDPROXY_CACHE_DIR", str(cache))
    with pytest.raises(EngineError) as err:
        load_model(str(path))
    assert "'gemma'" in str(err.value) and "qwen3" in str(err.value)
    assert not os.path.exists(cache)  # nothing converted, nothing cached
