"""Fixtures shared by the token-in-token-out tests: SmolLM2's encoder for scripting the
fake SGLang's output, and a fake vLLM."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from seedproxy.engine.model import default_gguf_path, gguf_tokenizer_dir
from tests.helpers.fake_compat import CompatSwitches, create_fake_vllm
from tests.helpers.servers import ServerThread

EOT = 2  # <|im_end|> in SmolLM2's vocabulary


@pytest.fixture(scope="module")
def encode() -> Callable[[str], list[int]]:
    """``text``'s ids in SmolLM2's tokenizer, then the end-of-turn id."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(gguf_tokenizer_dir(default_gguf_path())))
    return lambda text: list(tok.encode(text, add_special_tokens=False)) + [EOT]


@pytest.fixture
def vllm() -> Iterator[tuple[str, CompatSwitches]]:
    switches = CompatSwitches()
    with ServerThread(create_fake_vllm(switches)) as upstream:
        yield upstream.url, switches
