"""Untrusted images: only data: URLs and base64 sources by default, checked before any
index is used; no URL an upstream would fetch reaches it, in passthrough mode too."""

from __future__ import annotations

import base64
import io
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from PIL import Image
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.conftest import Fake
from tests.helpers.images import data_url, png
from tests.helpers.servers import ServerThread


def chat(url: str) -> dict[str, Any]:
    return {"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "what is on screen?"},
        {"type": "image_url", "image_url": {"url": url}}]}]}


def messages_with(source: dict[str, Any]) -> dict[str, Any]:
    return {"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": [
        {"type": "image", "source": source}, {"type": "text", "text": "what is on screen?"}]}]}


def responses_with(url: str) -> dict[str, Any]:
    return {"model": "m", "max_output_tokens": 4, "input": [{"role": "user", "content": [
        {"type": "input_text", "text": "what is on screen?"},
        {"type": "input_image", "image_url": url}]}]}


class Fetches:
    """A loopback image host that counts the GETs it answers."""

    def __init__(self, server: ServerThread, counted: list[str]) -> None:
        self.server, self.counted = server, counted

    def url(self, name: str) -> str:
        return f"{self.server.url}/{name}"


@pytest.fixture
def image_host() -> Iterator[Fetches]:
    counted: list[str] = []
    image = png(8, 8)

    async def serve(request: Request) -> Response:
        counted.append(request.url.path)
        return Response(image, media_type="image/png")

    app = Starlette(routes=[Route("/{name}", serve)])
    with ServerThread(app) as server:
        yield Fetches(server, counted)


def refused(answer: httpx.Response, *, anthropic: bool = False) -> str:
    assert answer.status_code == 400, answer.text
    assert "x-seedproxy-request-index" not in answer.headers
    if anthropic:
        body = answer.json()
        assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
        return str(body["error"]["message"])
    error = answer.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return str(error["message"])


def test_passthrough_forwards_no_fetchable_image_url_on_any_route(
    fake: Fake, start_proxy: Callable[..., str], image_host: Fetches
) -> None:
    fake.switches.fetch_images = True  # as SGLang's get_image_bytes would
    url = start_proxy([fake.url], token_in_token_out=False)
    fetchable = image_host.url("shot.png")
    with httpx.Client(base_url=url, timeout=60) as http:
        for target in (fetchable, "file:///etc/passwd", "/etc/passwd"):
            refused(http.post("/sessions/s/v1/chat/completions", json=chat(target)))
            refused(http.post("/sessions/s/v1/responses", json=responses_with(target)))
            refused(http.post("/sessions/s/generate", json={
                "text": "hi", "image_data": [target], "sampling_params": {"max_new_tokens": 2}}))
        refused(http.post("/sessions/s/v1/messages",
                          json=messages_with({"type": "url", "url": fetchable})), anthropic=True)
        refused(http.post("/sessions/s/v1/chat/completions", json={
            "model": "m", "messages": [{"role": "user", "content": [
                {"type": "video_url", "video_url": {"url": image_host.url("clip.mp4")}}]}]}))
        ok = http.post("/sessions/s/v1/chat/completions", json=chat(data_url(png(8, 8))))
        assert ok.status_code == 200, ok.text
        assert ok.headers["x-seedproxy-request-index"] == "0"  # the refusals used none
    assert image_host.counted == []
    assert [m["messages"][0]["content"][1]["image_url"]["url"] for m in fake.received] == [
        data_url(png(8, 8))]


def test_an_allowed_host_is_forwarded_as_sent_and_fetched_by_the_upstream_only(
    fake: Fake, start_proxy: Callable[..., str], image_host: Fetches
) -> None:
    fake.switches.fetch_images = True
    url = start_proxy([fake.url], token_in_token_out=False, image_url_hosts=["127.0.0.1"])
    with httpx.Client(base_url=url, timeout=60) as http:
        ok = http.post("/v1/chat/completions", json=chat(image_host.url("allowed.png")))
        assert ok.status_code == 200, ok.text
        # user info cannot smuggle another host past the list, nor can file:// pass
        refused(http.post("/v1/chat/completions",
                          json=chat("http://127.0.0.1@localhost/x.png")))
        refused(http.post("/v1/chat/completions", json=chat("file:///etc/passwd")))
    assert image_host.counted == ["/allowed.png"]  # the upstream's one fetch, not ours


def test_images_out_of_bounds_are_400s_in_the_routes_shape_using_no_index(
    fake: Fake, start_proxy: Callable[..., str]
) -> None:
    url = start_proxy([fake.url], token_in_token_out=False, max_image_bytes=4096,
                      max_image_pixels=64 * 64, max_images=2)
    whole = png(32, 32)
    noisy = io.BytesIO()
    Image.frombytes("L", (60, 60), bytes(range(256)) * 15).save(noisy, "PNG")
    assert len(noisy.getvalue()) < 4096
    big = io.BytesIO()
    Image.frombytes("RGB", (60, 60), bytes((i * 7919) % 251 for i in range(10800))).save(
        big, "BMP")
    cases = {
        "not base64": "data:image/png;base64,@@@@",
        "not ascii": "data:image/png;base64,\u00e9\u00e9\u00e9\u00e9",
        "not an image": data_url(b"GIF89a but not really an image at all"),
        "truncated": data_url(whole[: len(whole) // 2]),
        "declared jpeg, is png": data_url(whole, "image/jpeg"),
        "an unaccepted type": data_url(big.getvalue(), "image/bmp"),
        "over the pixels": data_url(png(65, 65)),
        "over the bytes": data_url(b"\x89PNG" + bytes(5000)),
    }
    with httpx.Client(base_url=url, timeout=60) as http:
        messages = {}
        for name, bad in cases.items():
            messages[name] = refused(http.post("/sessions/b/v1/chat/completions", json=chat(bad)))
        three = chat(data_url(whole))
        three["messages"][0]["content"] *= 3
        messages["too many"] = refused(http.post("/sessions/b/v1/chat/completions", json=three))
        payload = base64.b64encode(whole[: len(whole) // 2]).decode()
        messages["anthropic"] = refused(http.post("/sessions/b/v1/messages", json=messages_with(
            {"type": "base64", "media_type": "image/png", "data": payload})), anthropic=True)
        accepted = http.post("/sessions/b/v1/chat/completions",
                             json=chat(data_url(noisy.getvalue())))
        assert accepted.status_code == 200, accepted.text
        assert accepted.headers["x-seedproxy-request-index"] == "0"
    assert messages == {
        "not base64": "an image's data is not valid base64",
        "not ascii": "an image's data is not valid base64",
        "not an image": "an image is not a PNG, JPEG, GIF or WebP image",
        "truncated": "an image's data does not decode",
        "declared jpeg, is png": "an image declared image/jpeg is image/png",
        "an unaccepted type": "image media type 'image/bmp' is not accepted "
                              "(one of image/gif, image/jpeg, image/png, image/webp)",
        "over the pixels": "an image of 65x65 is over 4096 pixels",
        "over the bytes": "an image is over 4096 bytes",
        "too many": "3 images in one request; at most 2 are accepted",
        "anthropic": "an image's data does not decode",
    }
    assert len(fake.received) == 1
