"""The engine's SGLang-style /detokenize, which the /ui viewer uses for token text."""

from __future__ import annotations

import httpx

from seedproxy.engine import RunningEngine


def test_detokenize_decodes_ids_with_the_models_tokenizer(
    engine: RunningEngine, client: httpx.Client
) -> None:
    from transformers import AutoTokenizer

    from seedproxy.engine.model import default_gguf_path, gguf_tokenizer_dir

    tokenizer = AutoTokenizer.from_pretrained(str(gguf_tokenizer_dir(default_gguf_path())))
    body = {"prompt": "Hello there", "max_tokens": 4, "return_token_ids": True}
    ids = client.post("/v1/completions", json=body).json()["choices"][0]["token_ids"]
    assert len(ids) == 4
    for token in ids:
        answer = client.post("/detokenize", json={"tokens": [token]})
        assert answer.status_code == 200
        assert answer.json() == {"text": tokenizer.decode([token])}
    for bad in ({"tokens": [-1]}, {"tokens": ["a"]}, {"tokens": [10**9]}, {}):
        refused = client.post("/detokenize", json=bad)
        assert refused.status_code == 400 and refused.json()["message"]
