"""Incremental detokenisation equals a full decode, token by token."""

from __future__ import annotations

import random
from typing import Any

import pytest

pytestmark = pytest.mark.engine

pytest.importorskip("transformers")

from seedproxy.engine.generator import TextState  # noqa: E402
from seedproxy.engine.testing import tiny_tokenizer  # noqa: E402


@pytest.fixture(scope="module")
def tok() -> Any:
    return tiny_tokenizer()


def sequences(tok: Any) -> list[list[int]]:
    text = "Héllo wörld! 世界 🐉🐲 naïve café — ok.\n\tend"
    ids = tok.encode(text, add_special_tokens=False)
    rng = random.Random(0)
    rand = [rng.randrange(len(tok)) for _ in range(300)]
    specials = [tok.eos_token_id, *ids[:5], tok.eos_token_id, *ids[5:]]
    return [ids, rand, specials]


@pytest.mark.parametrize("skip", [True, False])
def test_every_prefix_matches_full_decode(tok: Any, skip: bool) -> None:
    for ids in sequences(tok):
        state = TextState(tok, (), skip)
        for n in range(1, len(ids) + 1):
            state.update(ids[:n])
            assert state.text == tok.decode(ids[:n], skip_special_tokens=skip)
            assert state.text.startswith(state.stable_text(False))


def test_split_utf8_is_withheld_until_complete(tok: Any) -> None:
    ids = tok.encode("🐉", add_special_tokens=False)
    assert len(ids) > 1  # a 4-byte character split over byte tokens
    state = TextState(tok, (), True)
    for n in range(1, len(ids)):
        state.update(ids[:n])
        assert state.stable_text(False) == ""
    state.update(ids)
    assert state.stable_text(False) == "🐉"


def test_stop_string_across_tokens(tok: Any) -> None:
    ids = tok.encode("one two three four", add_special_tokens=False)
    state = TextState(tok, ("e fo",), True)
    matched = None
    for n in range(1, len(ids) + 1):
        matched = state.update(ids[:n])
        if matched:
            break
    assert matched == "e fo" and state.text == "one two thre"


def test_tokenizer_work_per_token_is_bounded(tok: Any) -> None:
    """Each update decodes a window of a few ids, not the whole output."""
    decoded: list[int] = []

    class Counting:
        def decode(self, ids: list[int], skip_special_tokens: bool) -> str:
            decoded.append(len(ids))
            return str(tok.decode(ids, skip_special_tokens=skip_special_tokens))

    ids = tok.encode("word " * 400, add_special_tokens=False)
    state = TextState(Counting(), (), True)
    for n in range(1, len(ids) + 1):
        state.update(ids[:n])
    assert max(decoded) <= 3 and state.text == tok.decode(ids)
