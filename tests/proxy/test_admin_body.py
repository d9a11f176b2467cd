"""Admin routes check the key before reading a body, and ``--max-body-bytes`` bounds
every route's body (413 in OpenAI's shape, after auth, before parsing)."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator

import httpx
import orjson

from tests.conftest import Fake

KEY = "admin-secret"
HUGE = 200_000_000


def exchange_head_only(
    url: str, path: str, headers: dict[str, str], sent: bytes
) -> tuple[int, bytes]:
    """POST with ``Content-Length: HUGE`` but only ``sent`` of the body, then read the
    answer: a server that read the body before answering would never answer."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        lines = [f"POST {path} HTTP/1.1", f"host: {host}", f"content-length: {HUGE}",
                 "content-type: application/json"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + sent)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            assert chunk, "connection closed without an answer"
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = int(
            next(
                line.split(b":")[1]
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length")
            )
        )
        while len(body) < length:
            chunk = sock.recv(65536)
            assert chunk
            body += chunk
    return int(head.split(b" ")[1]), body


def test_an_unauthenticated_huge_post_is_refused_without_reading_it(
    fake: Fake, start_proxy: Callable[..., str]
) -> None:
    url = start_proxy([fake.url], admin_key=KEY)
    for path in ("/sessions", "/sessions/a/reward", "/trajectories/export"):
        status, body = exchange_head_only(url, path, {}, b'{"identity": "')
        assert status == 401, body
        assert set(orjson.loads(body)["error"]) == {"message", "type", "param", "code"}
        status, body = exchange_head_only(url, path, {"authorization": "Bearer wrong"}, b"{")
        assert status in (401, 403), body


def test_an_authenticated_body_over_the_limit_is_413_on_admin_routes(
    fake: Fake, start_proxy: Callable[..., str]
) -> None:
    url = start_proxy([fake.url], admin_key=KEY, max_body_bytes=4096)
    auth = {"authorization": f"Bearer {KEY}"}
    # Declared too large: refused before a byte of it is read.
    status, body = exchange_head_only(url, "/sessions", auth, b"{")
    assert status == 413, body
    assert orjson.loads(body)["error"]["type"] == "invalid_request_error"

    def chunks() -> Iterator[bytes]:  # no content-length: the limit holds while reading
        yield b'{"identity": "a", "metadata": {"pad": "'
        yield b"x" * 8192
        yield b'"}}'

    with httpx.Client(base_url=url, headers=auth, timeout=30) as http:
        for path in ("/sessions", "/sessions/a/reward", "/trajectories/export"):
            answer = http.post(path, content=chunks())
            assert answer.status_code == 413, answer.text
        small = http.post("/sessions", json={"identity": "a", "metadata": {"pad": "x" * 100}})
        assert small.status_code == 201
        assert http.get("/sessions/a").json()["metadata"] == {"pad": "x" * 100}
        bad = http.post("/sessions", content=b"{not json")
        assert bad.status_code == 400 and bad.json()["error"]["param"] is None
        wrong = http.post("/sessions", json={"group_size": 0})
        assert wrong.status_code == 400 and wrong.json()["error"]["param"] == "group_size"
