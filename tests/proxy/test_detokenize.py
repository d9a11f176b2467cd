"""``POST /ui/api/detokenize`` over real HTTP to the fake SGLang: one upstream request
per call whatever the number of ids, cached texts, and an upstream that cannot
detokenize asked once, then left alone for a while."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx

from seedproxy.proxy.ui import TokenDecoder
from seedproxy.transport.client import upstream_client
from tests.conftest import Fake
from tests.helpers.fake_sglang import VOCAB_BASE, detok


def decode(proxy: str, ids: list[int]) -> httpx.Response:
    answer = httpx.post(proxy + "/ui/api/detokenize", json={"ids": ids}, timeout=60)
    assert answer.status_code == 200, answer.text
    return answer


def test_every_distinct_id_is_decoded_in_one_upstream_request_and_cached(
    fake: Fake, start_proxy: Callable[..., str]
) -> None:
    proxy = start_proxy([fake.url])
    ids = list(range(8190))
    shown = decode(proxy, ids + [5, 7]).json()["tokens"]  # 8,192 ids, the most in a call
    assert shown == {str(i): detok([i]) for i in ids}
    assert fake.switches.detokenized == [
        {"tokens": [[i] for i in ids], "skip_special_tokens": False}]
    assert decode(proxy, [7, 5, 7]).json()["tokens"] == {"5": detok([5]), "7": detok([7])}
    assert len(fake.switches.detokenized) == 1  # all cached
    words = [VOCAB_BASE + 3, VOCAB_BASE]
    assert decode(proxy, [9, *words]).json()["tokens"] == {
        "9": detok([9]), **{str(w): detok([w]) for w in words}}
    assert fake.switches.detokenized[1]["tokens"] == [[VOCAB_BASE], [VOCAB_BASE + 3]]


def test_an_upstream_that_cannot_detokenize_is_asked_once_for_a_while(
    fake: Fake, start_proxy: Callable[..., str]
) -> None:
    fake.switches.detokenize = False
    proxy = start_proxy([fake.url])
    for ids in ([1, 2, 3], list(range(8192)), [4]):
        assert decode(proxy, ids).json() == {"tokens": None}
    assert len(fake.switches.detokenized) == 1
    fake.switches.detokenize = True  # the failure is remembered, not re-asked per call
    assert decode(proxy, [1]).json() == {"tokens": None}
    assert len(fake.switches.detokenized) == 1


def test_a_failure_is_forgotten_after_retry_after_s(fake: Fake) -> None:
    now = [1000.0]

    async def scenario() -> list[dict[int, str] | None]:
        async with upstream_client(read_timeout_s=10, connect_timeout_s=5) as client:
            decoder = TokenDecoder(client, retry_after_s=30.0, clock=lambda: now[0])
            fake.switches.detokenize = False
            results = [await decoder.decode(fake.url, [1, 2])]
            fake.switches.detokenize = True
            now[0] += 29.0
            results.append(await decoder.decode(fake.url, [1, 2]))  # still remembered
            now[0] += 1.0
            results.append(await decoder.decode(fake.url, [1, 2]))  # asked again
            return results

    assert asyncio.run(scenario()) == [None, None, {1: detok([1]), 2: detok([2])}]
    assert len(fake.switches.detokenized) == 2

