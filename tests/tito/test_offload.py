"""A full render of a large history runs on a worker thread, not the event loop.

The proxy runs under uvicorn with an injected token-in-token-out mode whose renderer
records the thread of every full render; a short first turn renders on the server's
event-loop thread, a brought 200-message history on another thread, and both prompts
are the renders of their messages exactly.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from seedproxy.settings import Settings
from tests.conftest import Fake

pytest.importorskip("transformers")

from seedproxy.engine.model import default_gguf_path, gguf_tokenizer_dir  # noqa: E402
from seedproxy.pipeline.readers.tito import OFFLOAD_CHARS  # noqa: E402
from seedproxy.proxy.app import create_app, open_tito_mode  # noqa: E402
from tests.helpers.servers import ServerThread  # noqa: E402

TEMPLATE = str(Path(__file__).parents[1] / "helpers" / "qwen3_style.jinja")


def test_a_large_full_render_runs_off_the_event_loop(fake: Fake) -> None:
    settings = Settings(upstream=[fake.url], token_in_token_out=True,
                        tokenizer=str(gguf_tokenizer_dir(default_gguf_path())),
                        chat_template=TEMPLATE)
    mode = open_tito_mode(settings)
    renderer = mode.renderer
    threads: list[tuple[int, str]] = []
    full_text = renderer.full_text

    def recording(messages: list[dict[str, Any]], *args: Any, **kwargs: Any) -> str:
        text = full_text(messages, *args, **kwargs)
        threads.append((threading.get_ident(), text))
        return text

    renderer.full_text = recording  # type: ignore[method-assign]
    brought: list[Any] = []
    for k in range(100):
        brought += [{"role": "user", "content": f"question {k} " + "word " * 40},
                    {"role": "assistant", "content": f"answer {k}"}]
    brought.append({"role": "user", "content": "and now?"})
    assert sum(len(m["content"]) for m in brought) >= OFFLOAD_CHARS
    short = [{"role": "user", "content": "hi"}]
    with ServerThread(create_app(settings, tito=mode)) as server, httpx.Client(
            base_url=server.url, timeout=120) as http:
        loop_thread = server._thread.ident
        for session, messages in (("short", short), ("long", brought)):
            answer = http.post(f"/sessions/{session}/v1/chat/completions",
                               json={"model": "m", "messages": messages, "max_tokens": 2})
            assert answer.status_code == 200, answer.text
        records = [http.get(f"/sessions/{s}/trajectory").json()["interactions"][0]
                   for s in ("short", "long")]
    (short_thread, short_text), (long_thread, long_text) = threads
    assert short_thread == loop_thread and long_thread != loop_thread
    encode = renderer.encode
    assert [r["prompt_token_ids"] for r in records] == [encode(short_text), encode(long_text)]
