"""Incremental decoding: the fast path (the Rust backend, one decode a token) gives
exactly the text the reference rule gives through ``tokenizer.decode``, id by id."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("transformers")

from seedproxy.detokenize import IncrementalDecoder, decoder_of  # noqa: E402
from seedproxy.engine.model import default_gguf_path, gguf_tokenizer_dir  # noqa: E402

TEXTS = ["I 😀 you", "naïve café — 日本語のテキスト", "🇫🇷🧑‍🔬 ok", " leading  spaces\n\tand tabs",
         "<|im_start|>user\nhi<|im_end|>", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ✓"]


@pytest.fixture(scope="module")
def tok() -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(gguf_tokenizer_dir(default_gguf_path())))


def reference(tok: Any, ids: list[int], hidden: frozenset[int]) -> list[str]:
    """The rule, spelled out with two wrapper decodes a token."""
    def decode(part: list[int]) -> str:
        return str(tok.decode(part, skip_special_tokens=False,
                              clean_up_tokenization_spaces=False))
    out, seen, prefix, read = [], [], 0, 0
    for token_id in ids:
        if token_id in hidden:
            out.append("")
            continue
        seen.append(token_id)
        before, now = decode(seen[prefix:read]), decode(seen[prefix:])
        if len(now) > len(before) and not now.endswith("\ufffd"):
            prefix, read = read, len(seen)
            out.append(now[len(before):])
        else:
            out.append("")
    before, now = decode(seen[prefix:read]), decode(seen[prefix:])
    out.append(now[len(before):] if len(now) > len(before) else "")
    return out


def fed(tok: Any, ids: list[int], hidden: frozenset[int]) -> list[str]:
    decoder = IncrementalDecoder(decoder_of(tok), hidden)
    return [decoder.feed(i) for i in ids] + [decoder.finish()]


@pytest.mark.parametrize("text", TEXTS)
def test_real_texts_decode_as_the_reference_rule_does(tok: Any, text: str) -> None:
    ids = tok.encode(text, add_special_tokens=False)
    assert fed(tok, ids, frozenset()) == reference(tok, ids, frozenset())
    assert "".join(fed(tok, ids, frozenset())) == text


def test_an_emoji_split_over_byte_tokens_is_released_whole(tok: Any) -> None:
    ids = tok.encode("I 😀 you", add_special_tokens=False)
    chunks = fed(tok, ids, frozenset())
    assert "\ufffd" in tok.decode(ids[1:2])  # the emoji takes more than one token
    assert "\ufffd" not in "".join(chunks)
    assert [c for c in chunks if "😀" in c] == [" 😀"]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(st.integers(0, 49151), st.sampled_from([0, 1, 2, 9468, 3055])),
                max_size=40),
       st.sets(st.integers(0, 16), max_size=3))
def test_any_ids_decode_as_the_reference_rule_does(tok: Any, ids: list[int],
                                                    hidden: set[int]) -> None:
    assert fed(tok, ids, frozenset(hidden)) == reference(tok, ids, frozenset(hidden))


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=30), st.integers(0, 5))
def test_text_cut_anywhere_decodes_as_the_reference_rule_does(tok: Any, text: str,
                                                               cut: int) -> None:
    ids = tok.encode(text, add_special_tokens=False)
    ids = ids[cut:]  # starts mid-character sometimes
    assert fed(tok, ids, frozenset()) == reference(tok, ids, frozenset())


TRICKY = [*TEXTS, "a\ufffdb", "\u00e9\u0301 combining", "🏳️‍🌈" * 3, "x" + "😀" * 5 + "y"]


@pytest.mark.parametrize("name", ["smollm2", "qwen3", "llama3.1", "mistral-nemo", "gpt-oss"])
def test_decode_stream_releases_the_same_pieces_and_the_whole_decode(tok: Any,
                                                                      name: str) -> None:
    """``tokenizers``' ``DecodeStream`` releases exactly these pieces (SmolLM2 and real
    tokenizers; texts cut mid-character too), and pieces plus ``finish`` are the whole
    decode: the hand-written decoder loses nothing against it."""
    from tokenizers.decoders import DecodeStream

    from tests.helpers.real_tokenizers import family

    tokenizer = tok if name == "smollm2" else family(name)
    for text in TRICKY:
        full = tokenizer.encode(text, add_special_tokens=False)
        for ids in (full, full[1:], full[:-1]):
            stream = DecodeStream(skip_special_tokens=False)
            theirs = [stream.step(tokenizer.backend_tokenizer, i) or "" for i in ids]
            pieces = fed(tokenizer, ids, frozenset())
            assert pieces[:-1] == theirs
            assert "".join(pieces) == tokenizer.decode(ids, skip_special_tokens=False,
                                                       clean_up_tokenization_spaces=False)
