"""Interleaved multi-turn sessions reuse their own KV prefixes, bit-exactly."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytestmark = pytest.mark.engine

torch = pytest.importorskip("torch")

from seedproxy.engine.generator import Generator, GenRequest, Update  # noqa: E402
from seedproxy.engine.llama import KVBuffer, PrefixCache  # noqa: E402
from seedproxy.engine.params import parse_sampling_params  # noqa: E402
from seedproxy.engine.testing import tiny_model  # noqa: E402


@pytest.fixture(scope="module")
def model() -> Iterator[Any]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield tiny_model()
    torch.set_num_threads(threads)


def run(gen: Generator, prompt: list[int], seed: int) -> Update:
    params = parse_sampling_params({"max_new_tokens": 8, "sampling_seed": seed,
                                    "ignore_eos": True}, gen.model.vocab_size)
    with torch.inference_mode():
        return gen.run(GenRequest("r", prompt, params, return_logprob=True),
                       lambda u: None, lambda: False)


def rollouts(gen: Generator, sessions: int, turns: int) -> list[list[Update]]:
    """Round-robin turns: session s's turn t extends its history with a user message."""
    history = [[100 + s, 200 + s, 300 + s] for s in range(sessions)]
    out: list[list[Update]] = [[] for _ in range(sessions)]
    for t in range(turns):
        for s in range(sessions):
            prompt = history[s] + [400 + t, 500 + s]
            upd = run(gen, prompt, seed=s * 10 + t)
            out[s].append(upd)
            history[s] = prompt + upd.output_ids
    return out


def test_interleaved_sessions_hit_the_cache_and_match_cold(model: Any) -> None:
    cached = rollouts(Generator(model), sessions=4, turns=3)
    cold = rollouts(Generator(model, cache_mb=0), sessions=4, turns=3)
    for s in range(4):
        for t in range(3):
            a, b = cached[s][t], cold[s][t]
            assert (a.output_ids, a.logprobs) == (b.output_ids, b.logprobs)
            assert b.cached_tokens == 0
            # turn t's prompt holds turn t-1's prompt and all but its last sampled token
            expected = 0 if t == 0 else b.prompt_tokens - 3
            assert a.cached_tokens == expected


def test_group_shares_the_prompt(model: Any) -> None:
    """A GRPO group: the same prompt with 4 seeds; later members reuse the first's KV."""
    gen = Generator(model)
    prompt = list(range(10, 40))
    first = run(gen, prompt, seed=0)
    later = [run(gen, prompt, seed=s) for s in (1, 2, 3)]
    assert first.cached_tokens == 0 and all(u.cached_tokens == 29 for u in later)
    cold = [run(Generator(model, cache_mb=0), prompt, seed=s) for s in (1, 2, 3)]
    assert [u.output_ids for u in later] == [u.output_ids for u in cold]
    assert [u.logprobs for u in later] == [u.logprobs for u in cold]


def buffer(length: int) -> KVBuffer:
    kv = KVBuffer(1, 1, 2, length)
    kv.length = length
    return kv


def test_cache_is_bounded_lru() -> None:
    per_token = 2 * 2 * 4  # k and v, head_dim 2, float32
    cache = PrefixCache(capacity_bytes=25 * per_token)
    cache.insert(list(range(10)), buffer(10))
    cache.insert(list(range(100, 110)), buffer(10))
    assert cache.lookup(list(range(5)) + [99])[0] == 5  # touches the first entry
    cache.insert(list(range(200, 210)), buffer(10))     # evicts the least recent
    assert len(cache) == 2 and cache.nbytes <= 25 * per_token
    assert cache.lookup(list(range(100, 110)))[0] == 0
    assert cache.lookup(list(range(10)))[0] == 10
    cache.insert(list(range(12)), buffer(12))           # supersedes its own prefix
    assert len(cache) == 2 and cache.lookup(list(range(12)))[0] == 12
    cache.insert(list(range(300, 330)), buffer(30))     # larger than the budget: not kept
    assert cache.lookup(list(range(300, 330)))[0] == 0
