"""The engine's SGLang-style /detokenize, which the /ui viewer uses for token text."""

from __future__ import annotations

from collections.abc import Callable

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


def test_detokenize_takes_sglangs_batch_form_and_the_viewer_uses_it(
    engine: RunningEngine, client: httpx.Client, start_proxy: Callable[..., str]
) -> None:
    from transformers import AutoTokenizer

    from seedproxy.engine.model import default_gguf_path, gguf_tokenizer_dir

    tokenizer = AutoTokenizer.from_pretrained(str(gguf_tokenizer_dir(default_gguf_path())))
    special = tokenizer.convert_tokens_to_ids("<|im_end|>")
    ids = [special, *tokenizer.encode("Hello there, sea", add_special_tokens=False)]
    batch = client.post("/detokenize", json={"tokens": [[i] for i in ids],
                                             "skip_special_tokens": False})
    assert batch.json() == {"text": [tokenizer.decode([i]) for i in ids]}
    assert batch.json()["text"][0] == "<|im_end|>"
    skipped = client.post("/detokenize", json={"tokens": [[special], ids[1:2]]})
    assert skipped.json() == {"text": ["", tokenizer.decode(ids[1:2])]}  # SGLang's default
    for bad in ({"tokens": [[1], 2]}, {"tokens": [[1], [-1]]},
                {"tokens": [1], "skip_special_tokens": "no"}):
        assert client.post("/detokenize", json=bad).status_code == 400

    proxy = start_proxy([engine.url])
    shown = httpx.post(proxy + "/ui/api/detokenize", json={"ids": ids + ids}, timeout=60)
    assert shown.json() == {"tokens": {str(i): tokenizer.decode([i]) for i in ids}}
