"""An upstream 200 whose body has the wrong shape is a 502 (an SSE error event once a
stream began), recorded as a 502, never passed on as a success; a bug in seedproxy's
own reading of a well-shaped answer is a 500, never blamed on the upstream."""

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

from seedproxy.dialects.sglang import SGLangBackend
from tests.helpers.servers import ServerThread


class Upstream:
    answer: Any = None


@pytest.fixture
def upstream() -> Iterator[tuple[str, Upstream]]:
    state = Upstream()

    async def answer(request: Request) -> Response:
        data = orjson.dumps(state.answer)
        if orjson.loads(await request.body()).get("stream"):
            async def events():  # type: ignore[no-untyped-def]
                yield b"data: " + data + b"\n\n"
                yield b"data: [DONE]\n\n"

            return StreamingResponse(events(), media_type="text/event-stream")
        return Response(data, media_type="application/json")

    app = Starlette(routes=[
        Route(path, answer, methods=["POST"])
        for path in ("/v1/chat/completions", "/v1/completions", "/generate")
    ])
    with ServerThread(app) as server:
        yield server.url, state


BODIES = {
    "v1/chat/completions": {"model": "m", "messages": [{"role": "user", "content": "x"}]},
    "v1/completions": {"model": "m", "prompt": "x"},
    "generate": {"text": "x"},
}
WRONG = [
    ("v1/chat/completions", []),
    ("v1/chat/completions", {"choices": "weird"}),
    ("v1/chat/completions", {"choices": [{"index": 0, "message": "hi"}]}),
    ("v1/chat/completions", {"choices": [{"index": 0, "delta": {"tool_calls": "x"}}]}),
    ("v1/completions", []),
    ("v1/completions", {"choices": "weird"}),
    ("v1/completions", {"choices": [{"index": "0", "text": "a"}]}),
    ("generate", [1]),
    ("generate", "text"),
    ("generate", {"text": 5, "meta_info": {}}),
]


def _error_events(text: str) -> list[dict[str, Any]]:
    events = [orjson.loads(e.removeprefix("data: ")) for e in text.split("\n\n") if e.strip()]
    return [e for e in events if isinstance(e, dict) and "error" in e]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("path", "wrong"), WRONG)
def test_a_wrongly_shaped_answer_is_a_502_and_never_a_recorded_success(
    upstream: tuple[str, Upstream],
    start_proxy: Callable[..., str],
    path: str,
    wrong: Any,
    stream: bool,
) -> None:
    url, state = upstream
    if stream and path == "v1/chat/completions" and isinstance(wrong, dict):
        wrong = orjson.loads(orjson.dumps(wrong).replace(b'"message"', b'"delta"'))
    state.answer = wrong
    proxy = start_proxy([url])
    with httpx.Client(base_url=proxy, timeout=30) as http:
        response = http.post(f"/sessions/s/{path}", json={**BODIES[path], "stream": stream})
        if stream:
            errors = _error_events(response.text)
            assert len(errors) == 1 and "data: [DONE]" not in response.text
            error = errors[0]["error"]
        else:
            assert response.status_code == 502, response.text
            error = response.json()["error"]
        interactions = http.get("/sessions/s/trajectory").json()["interactions"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"].startswith("upstream answer: ")
    assert [i["status"] for i in interactions] == [502]


def test_a_bug_reading_a_good_answer_is_a_500_not_a_502(
    fake: Any, start_proxy: Callable[..., str], monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise KeyError("seedproxy's own bug")

    monkeypatch.setattr(SGLangBackend, "finish", broken)
    proxy = start_proxy([fake.url])
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    with httpx.Client(base_url=proxy, timeout=30) as http:
        response = http.post("/sessions/b/v1/chat/completions", json=body)
    assert response.status_code == 500
    assert response.json()["error"]["type"] == "internal_error"
    assert "seedproxy's own bug" in caplog.text


def test_a_bug_reading_a_good_stream_is_recorded_as_a_500(
    fake: Any, start_proxy: Callable[..., str], monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    from seedproxy.dialects import sglang

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise KeyError("seedproxy's own stream bug")

    monkeypatch.setattr(sglang._OpenAIStream, "feed", broken)
    proxy = start_proxy([fake.url])
    body = {
        "model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
        "stream": True,
    }
    with httpx.Client(base_url=proxy, timeout=30) as http:
        with http.stream("POST", "/sessions/b/v1/chat/completions", json=body) as response:
            assert response.status_code == 200  # the head was out before the bug
            with pytest.raises(httpx.RemoteProtocolError):  # cut off, not a clean end
                response.read()
        interactions = http.get("/sessions/b/trajectory").json()["interactions"]
    assert [i["status"] for i in interactions] == [500]
    assert "seedproxy's own stream bug" in capfd.readouterr().err  # the server logged it
