"""The real SmolLM2-135M (slow: converts the GGUF on first use)."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.engine, pytest.mark.slow]


def test_smollm2_knows_paris() -> None:
    import httpx

    from seedproxy.engine import load_model, start_engine_thread

    model = load_model(None)
    assert model.name == "SmolLM2-135M-Instruct" and model.context_length == 8192
    running = start_engine_thread(model)
    try:
        r = httpx.post(running.url + "/v1/chat/completions", timeout=120, json={
            "messages": [{"role": "user", "content": "What is the capital of France?"}],
            "temperature": 0, "max_tokens": 16})
        assert r.status_code == 200
        assert "Paris" in r.json()["choices"][0]["message"]["content"]
        assert httpx.get(running.url + "/v1/models").json()["data"][0]["id"] == model.name
    finally:
        running.stop()
