"""Parity with SGLang's own server in token-in-token-out mode (issue 24), through a real
proxy under uvicorn in front of the engine (tiny model), driven over HTTP."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from seedproxy.engine import RunningEngine
from seedproxy.engine.model import default_gguf_path, gguf_tokenizer_dir

pytestmark = pytest.mark.engine

MESSAGES = [{"role": "user", "content": "Say something."}]


@pytest.fixture
def tito(engine: RunningEngine, start_proxy: Callable[..., str]) -> str:
    return start_proxy([engine.url], token_in_token_out=True,
                       tokenizer=str(gguf_tokenizer_dir(default_gguf_path())))


def chat(base: str, path: str = "/v1/chat/completions", **fields: Any) -> httpx.Response:
    body = {"model": "m", "messages": MESSAGES, "max_tokens": 4, **fields}
    return httpx.post(base + path, json=body, timeout=120)


def test_ids_outside_a_session_are_distinct(tito: str) -> None:
    """Two requests outside any session never share an answer id, even with the same
    prompt; in a session the id is the derived one, the same on a replay."""
    first, second = chat(tito), chat(tito, temperature=0.7)
    assert first.status_code == second.status_code == 200, (first.text, second.text)
    ids = {first.json()["id"], second.json()["id"], chat(tito).json()["id"]}
    assert len(ids) == 3 and all(i.startswith("chatcmpl-") for i in ids)
    in_a = chat(tito, "/sessions/ids-a/v1/chat/completions").json()["id"]
    again = httpx.post(tito + "/sessions", json={"identity": "ids-a"}, timeout=30).json()
    replay_id = again["sessions"][0]["session_id"]
    in_b = chat(tito, f"/sessions/{replay_id}/v1/chat/completions").json()["id"]
    assert in_a == in_b and in_a not in ids
