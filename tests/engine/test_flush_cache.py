"""The engine's ``/flush_cache``, as SGLang 0.5.23 answers it (``http_server.py``): the
prefix cache is emptied and the answer is 200 with SGLang's text; while a request is
running nothing is flushed and the answer is a 400."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from seedproxy.engine import RunningEngine, start_engine_thread
from seedproxy.engine.testing import tiny_model
from tests.helpers.step_hold import StepHold

pytestmark = pytest.mark.engine

FLUSHED = ("Cache flushed.\nPlease check backend logs for more details. (When there are "
           "running or waiting requests, the operation will not be performed.)\n")
BODY = {"input_ids": list(range(100, 140)), "sampling_params": {"max_new_tokens": 4}}


@pytest.fixture(scope="module")
def hold() -> StepHold:
    return StepHold()


@pytest.fixture(scope="module")
def held_engine(hold: StepHold) -> Iterator[RunningEngine]:
    running = start_engine_thread(tiny_model(), on_step=hold)
    yield running
    running.stop()


def cached(url: str) -> int:
    answer: dict[str, Any] = httpx.post(f"{url}/generate", json=BODY, timeout=120).json()
    return int(answer["meta_info"]["cached_tokens"])


@pytest.mark.parametrize("method", ["POST", "GET"])
def test_flush_cache_empties_the_prefix_cache(held_engine: RunningEngine, method: str) -> None:
    cached(held_engine.url)
    assert cached(held_engine.url) > 0  # the second run reuses the first one's prefix
    reply = httpx.request(method, f"{held_engine.url}/flush_cache", timeout=60)
    assert reply.status_code == 200 and reply.text == FLUSHED
    assert cached(held_engine.url) == 0


def test_nothing_is_flushed_while_a_request_runs(
        held_engine: RunningEngine, hold: StepHold) -> None:
    cached(held_engine.url)
    hold.reset()
    hold.arm(1)
    answers: list[Any] = []
    other = {**BODY, "input_ids": list(range(200, 230))}
    runner = threading.Thread(target=lambda: answers.append(httpx.post(
        f"{held_engine.url}/generate", json=other, timeout=120)))
    runner.start()
    assert hold.held.wait(120)
    try:
        reply = httpx.post(f"{held_engine.url}/flush_cache", timeout=60)
    finally:
        hold.release()
        runner.join()
        hold.reset()
    assert reply.status_code == 400 and reply.text == "Flush cache failed.\n"
    assert answers[0].status_code == 200
    assert cached(held_engine.url) > 0  # the cache was kept
