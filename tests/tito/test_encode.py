"""The renderer's encoder: the Rust backend called directly gives exactly the ids of
``tokenizer.encode(text, add_special_tokens=False)``, on every real tokenizer the
families are tested with, and the wrapper is kept where the two disagree."""

from __future__ import annotations

import random
from typing import Any

import pytest

pytest.importorskip("transformers")

from seedproxy.engine.model import default_gguf_path, gguf_tokenizer_dir  # noqa: E402
from seedproxy.tito.renderer import encoder_of  # noqa: E402
from tests.helpers import real_tokenizers  # noqa: E402

_WORDS = ["the", " café", "日本語", "🙂", "\n\n", "\t", "  ", "x=1;", "Ünïcödé", "'s", "123",
          "<think>", "</think>", "<tool_call>", "{\"a\": [1, 2]}", "é", "\u200b", "-->"]


def _texts(tok: Any, count: int, seed: int) -> list[str]:
    """Mixed texts, special tokens among them (both as special tokens and cut in two)."""
    rng = random.Random(seed)
    special = [str(t) for t in tok.all_special_tokens] or ["<s>"]
    pool = _WORDS + special + [t[: len(t) // 2] for t in special]
    return ["".join(rng.choice(pool) for _ in range(rng.randint(0, 24))) for _ in range(count)]


def _tokenizers() -> list[tuple[str, Any]]:
    from transformers import AutoTokenizer

    found = [("smollm2", AutoTokenizer.from_pretrained(
        str(gguf_tokenizer_dir(default_gguf_path()))))]
    for name in ("qwen3", "llama3.1", "r1-distill-qwen", "gpt-oss"):
        found.append((name, real_tokenizers.family(name)))
    return found


@pytest.fixture(scope="module")
def tokenizers() -> list[tuple[str, Any]]:
    return _tokenizers()


def test_the_backend_encodes_as_the_wrapper_on_every_real_tokenizer(
        tokenizers: list[tuple[str, Any]]) -> None:
    for seed, (name, tok) in enumerate(tokenizers):
        encode = encoder_of(tok)
        assert encode.__name__ == "direct", name  # the fast path is the one tested
        for text in _texts(tok, 300, seed):
            assert encode(text) == list(tok.encode(text, add_special_tokens=False)), (name, text)


def test_a_backend_that_disagrees_with_the_wrapper_is_not_used(
        tokenizers: list[tuple[str, Any]]) -> None:
    tok = tokenizers[0][1]

    class Wrapped:
        """The real tokenizer, with an encode that adds an id its backend does not."""

        backend_tokenizer = tok.backend_tokenizer
        all_special_tokens = tok.all_special_tokens

        def encode(self, text: str, add_special_tokens: bool) -> list[int]:
            return [*tok.encode(text, add_special_tokens=add_special_tokens), 7]

    encode = encoder_of(Wrapped())
    assert encode.__name__ == "wrapped"
    assert encode("hi") == [*tok.encode("hi", add_special_tokens=False), 7]
