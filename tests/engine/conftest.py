"""A real engine on 127.0.0.1 serving the tiny random model, shared by the session."""

from __future__ import annotations

from collections.abc import Iterator

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
