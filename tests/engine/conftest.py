"""A real engine on 127.0.0.1 serving the tiny random model, shared by the session."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from seedproxy.engine import RunningEngine, start_engine_thread  # noqa: E402
from seedproxy.engine.testing import tiny_model  # noqa: E402


@pytest.fixture(scope="session")
def engine() -> Iterator[RunningEngine]:
    running = start_engine_thread(tiny_model())
    yield running
    running.stop()


@pytest.fixture()
def client(engine: RunningEngine) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=engine.url, timeout=60) as c:
        yield c


@pytest.fixture()
def oai(engine: RunningEngine):  # type: ignore[no-untyped-def]
    openai = pytest.importorskip("openai")
    c = openai.OpenAI(base_url=engine.url + "/v1", api_key="none", max_retries=0)
    yield c
    c.close()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A saved 2-layer random Llama with SmolLM2's tokenizer, for ``serve --model``."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from seedproxy.engine.model import default_gguf_path, gguf_tokenizer_dir

    folder = tmp_path_factory.mktemp("tiny-llama")
    tokenizer = AutoTokenizer.from_pretrained(str(gguf_tokenizer_dir(default_gguf_path())))
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
        tie_word_embeddings=False,
    )
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
