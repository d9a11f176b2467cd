"""A handled 500 keeps the client's keep-alive connection: the next request on the same
connection is answered (Starlette re-raises after its 500 handler, and the server would
then close the connection)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

from tests.conftest import Fake


def _broken_counter(chat: dict[str, Any]) -> int:
    raise LookupError("a tokenizer bug")  # not ValueError: no 400 for it, our own 500


def _client_port(response: httpx.Response) -> int:
    stream = response.extensions["network_stream"]
    return int(stream.get_extra_info("client_addr")[1])


def test_a_handled_500_keeps_the_keep_alive_connection(
    fake: Fake, start_proxy: Callable[..., str]
) -> None:
    proxy = start_proxy([fake.url], _app={"prompt_counter": _broken_counter})
    body = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    with httpx.Client(base_url=proxy, timeout=30) as client:
        failed = client.post("/v1/messages/count_tokens", json=body)
        assert failed.status_code == 500
        assert failed.json() == {"type": "error", "error": {
            "type": "api_error", "message": "internal error"}}
        again = client.get("/healthz")
        assert again.status_code == 200
        assert _client_port(again) == _client_port(failed)  # the same connection
        third = client.post("/v1/messages/count_tokens", json=body)
        assert third.status_code == 500
        assert _client_port(third) == _client_port(failed)
