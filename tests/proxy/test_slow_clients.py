"""Slow or silent clients cannot hold connections for good: ``seedproxy serve``
closes a connection whose request head, or then whose body, does not arrive within
``--client-timeout`` (uvicorn alone never does). Real sockets against a real
``seedproxy serve`` process."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from tests.helpers.serving import Serving


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """One proxy for the module; no request here reaches its upstream."""
    proxy = Serving("--upstream", "http://127.0.0.1:9", "--client-timeout", "1",
                    log=tmp_path_factory.mktemp("slow") / "serve.log")
    try:
        yield proxy.wait().port
    finally:
        proxy.stop()


def read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (the socket's own
    timeout, far above the server's, only guards against a hang)."""
    sock.settimeout(60)
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


@pytest.mark.parametrize(
    "sent",
    [b"", b"POST /v1/chat/completions HTTP/1.1\r\n", b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-a: 1"],
)
def test_a_connection_that_never_finishes_its_head_is_closed(served: int, sent: bytes) -> None:
    with socket.create_connection(("127.0.0.1", served)) as sock:
        sock.sendall(sent)
        assert read_until_closed(sock) == b""


@pytest.mark.parametrize("path", ["/sessions/slow/v1/chat/completions", "/sessions"])
def test_a_body_that_never_arrives_closes_the_connection_and_creates_nothing(
    served: int, path: str
) -> None:
    with socket.create_connection(("127.0.0.1", served)) as sock:
        sock.sendall(
            f"POST {path} HTTP/1.1\r\nhost: x\r\n".encode()
            + b"content-type: application/json\r\ncontent-length: 100\r\n\r\n{\"session_id\""
        )
        assert read_until_closed(sock) == b""
    with socket.create_connection(("127.0.0.1", served)) as sock:
        sock.sendall(b"GET /sessions/slow HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        assert read_until_closed(sock).startswith(b"HTTP/1.1 404 ")  # and it made no session


def test_a_kept_alive_connection_gets_the_same_deadline_for_its_next_head(served: int) -> None:
    with socket.create_connection(("127.0.0.1", served)) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        sock.settimeout(60)
        first = b""
        while not first.endswith(b'{"status":"ok"}'):
            first += sock.recv(65536)
        assert first.startswith(b"HTTP/1.1 200 ")
        sock.sendall(b"GET /healthz HTTP/1.1\r\n")  # then silence
        assert read_until_closed(sock) == b""
