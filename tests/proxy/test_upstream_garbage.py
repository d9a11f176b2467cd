"""An upstream that answers nonsense never makes the proxy's own code answer 500:
the client gets the upstream's answer, or a 502 in OpenAI's shape, and the session
keeps one interaction per request."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
import orjson
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from tests.helpers.servers import ServerThread

GARBAGE: list[Any] = [
    [],
    "text",
    None,
    {"choices": {"0": 1}},
    {"choices": [1, "x", None]},
    {"choices": [{"message": "x", "logprobs": {"content": [{"logprob": "x"}]}}]},
    {"choices": [{"index": "a", "response_token_ids": [2**40, -1], "prompt_token_ids": "x"}]},
    {"choices": [{"index": 0, "token_ids": ["a"], "logprobs": {"token_logprobs": ["x", None]}}]},
    {"output_ids": [2**40], "meta_info": {"output_token_logprobs": [["x", 1], 5, []]}},
    {"output_ids": "x", "meta_info": []},
    {"usage": {"completion_tokens": "many"}, "choices": []},
]


class Garbage:
    answer: Any = None


@pytest.fixture
def garbage() -> Iterator[tuple[str, Garbage]]:
    state = Garbage()

    async def answer(request: Request) -> Response:
        body = orjson.loads(await request.body())
        data = orjson.dumps(state.answer)
        if body.get("stream"):
            async def events():  # type: ignore[no-untyped-def]
                yield b"data: " + data + b"\n\n"
                yield b"data: {not json\n\n"
                yield b"data: [DONE]\n\n"
            return StreamingResponse(events(), media_type="text/event-stream")
        return Response(data, media_type="application/json")

    app = Starlette(routes=[
        Route(path, answer, methods=["POST"])
        for path in ("/v1/chat/completions", "/v1/completions", "/generate")
    ])
    with ServerThread(app) as server:
        yield server.url, state


REQUESTS = [
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "n": 2}),
    ("/v1/completions", {"prompt": "x"}),
    ("/v1/responses", {"input": "x"}),
    ("/generate", {"input_ids": [1, 2], "sampling_params": {"n": 2}}),
    ("/generate", {"text": "x"}),
]


@pytest.mark.parametrize("stream", [False, True])
def test_nonsense_from_upstream_is_never_a_500(
    garbage: tuple[str, Garbage], start_proxy: Callable[..., str], stream: bool
) -> None:
    url, state = garbage
    proxy = start_proxy([url])
    sent = 0
    with httpx.Client(base_url=proxy, timeout=30) as http:
        for answer in GARBAGE:
            state.answer = answer
            for path, body in REQUESTS:
                response = http.post(
                    f"/sessions/g/{path.lstrip('/')}", json={**body, "stream": stream}
                )
                sent += 1
                assert response.status_code != 500, (answer, path, response.text)
                if response.status_code >= 400:
                    assert set(response.json()["error"]) == {"message", "type", "param", "code"}
        state_now = http.get("/sessions/g").json()
        assert state_now["next_index"] == sent
        trajectory = http.get("/sessions/g/trajectory")
        assert trajectory.status_code == 200
        assert len(trajectory.json()["interactions"]) == sent


@pytest.fixture
def cut_error() -> Iterator[str]:
    """An upstream whose error answer (500) breaks off mid-body: it promises 100 bytes
    and closes after 10."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        while (await receive()).get("more_body"):
            pass
        await send({"type": "http.response.start", "status": 500,
                    "headers": [(b"content-length", b"100")]})
        await send({"type": "http.response.body", "body": b'{"error": '})

    with ServerThread(app) as server:
        yield server.url


@pytest.mark.parametrize("stream", [False, True])
def test_an_error_answer_that_breaks_off_is_a_502_recorded_so(
    cut_error: str, start_proxy: Callable[..., str], stream: bool
) -> None:
    proxy = start_proxy([cut_error], max_failover=0)
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": stream}
    with httpx.Client(base_url=proxy, timeout=30) as http:
        response = http.post("/sessions/cut/v1/chat/completions", json=body)
        assert response.status_code == 502, response.text
        assert response.json()["error"]["type"] == "upstream_error"
        interactions = http.get("/sessions/cut/trajectory").json()["interactions"]
        assert [i["status"] for i in interactions] == [502]
