"""FastTransport on the wire, against byte-exact servers on loopback: framing, IPv6,
TLS with a self-signed certificate, forward proxies from the environment, the
re-send rule for reused connections, and the body bound."""

from __future__ import annotations

import asyncio
import gzip
import os
import shutil
import socket
import ssl
import subprocess
from pathlib import Path

import httpx
import pytest

from seedproxy.errors import ConfigError, UpstreamBodyTooLarge
from seedproxy.transport.client import LeanClient, upstream_client
from seedproxy.transport.connection import Proxies
from seedproxy.transport.fast import FastTransport, Timeouts
from tests.helpers.raw_http import CLOSE, ForwardProxy, RawRequest, RawServer, answer
from tests.helpers.seam import fails_with

NO_PROXIES = Proxies()


def _client(**transport: object) -> LeanClient:
    transport.setdefault("proxies", NO_PROXIES)
    return LeanClient(
        timeouts=Timeouts(5, 10, 10),
        transport=FastTransport(**transport),  # type: ignore[arg-type]
    )


def _echo(request: RawRequest) -> bytes:
    return answer(request.body + b"|" + request.headers["host"].encode())


async def test_connection_close_answers_are_not_reused() -> None:
    async with RawServer(lambda r: answer(r.body, headers="connection: close\r\n")) as server:
        async with _client() as client:
            for body in (b"one", b"two"):
                response = await client.post_stream(server.url, "/x", body, {})
                assert await response.aread() == body
    assert [r.connection for r in server.requests] == [0, 1]


async def test_a_body_delimited_by_the_connection_end_is_read_whole() -> None:
    def script(request: RawRequest) -> bytes:
        return b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n" + b"z" * 300_000

    async with RawServer(script) as server, _client() as client:
        response = await client.post_stream(server.url, "/x", b"{}", {})
        assert await response.aread() == b"z" * 300_000


async def test_an_idle_connection_past_its_expiry_is_not_reused() -> None:
    async with RawServer(lambda r: answer(b"ok")) as server:
        async with _client(idle_expiry_s=0) as client:
            for _ in range(2):
                assert (await client.request("GET", server.url + "/x")).content == b"ok"
    assert [r.connection for r in server.requests] == [0, 1]


async def test_a_chunked_body_is_read_and_the_connection_kept() -> None:
    def script(request: RawRequest) -> bytes:
        chunks = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in (b"abc", b"d" * 70_000))
        return b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + chunks + b"0\r\n\r\n"

    async with RawServer(script) as server, _client() as client:
        for _ in range(2):
            response = await client.post_stream(server.url, "/x", b"{}", {})
            assert await response.aread() == b"abc" + b"d" * 70_000
    assert [r.connection for r in server.requests] == [0, 0]


async def test_a_body_over_256_kib_arrives_intact_streamed_and_whole() -> None:
    big = bytes(range(256)) * 4096  # 1 MiB, past the transport's read-pause mark

    async with RawServer(lambda r: answer(big)) as server, _client() as client:
        response = await client.post_stream(server.url, "/x", b"{}", {})
        assert await response.aread() == big
        streamed = await client.request("GET", server.url + "/x", stream=True)
        parts = [part async for part in streamed.aiter_bytes()]
        await streamed.aclose()
        assert b"".join(parts) == big


def _has_ipv6_loopback() -> bool:
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not _has_ipv6_loopback(), reason="this machine has no ::1")
async def test_an_ipv6_upstream_gets_a_bracketed_host_header() -> None:
    async with RawServer(_echo, host="::1") as server, _client() as client:
        response = await client.post_stream(server.url, "/x", b"a", {})
        assert await response.aread() == b"a|[::1]:%d" % server.port
        got = await client.request("GET", server.url + "/y")
        assert got.content == b"|[::1]:%d" % server.port


# Re-sending: a POST that may have reached the server is never sent twice.


def _closes_the_second_request_on_each_connection() -> RawServer:
    """Answers a connection's first request, then reads its second and hangs up."""

    def script(request: RawRequest) -> bytes:
        earlier = [r for r in server.requests if r.connection == request.connection]
        return answer(b"ok") if len(earlier) == 1 else CLOSE

    server = RawServer(script)
    return server


async def test_a_post_is_not_resent_when_a_reused_connection_closes() -> None:
    async with _closes_the_second_request_on_each_connection() as server, _client() as client:
        first = await client.post_stream(server.url, "/x", b"1", {})
        assert await first.aread() == b"ok"
        with fails_with(httpx.RemoteProtocolError, match="not sent again"):
            await client.post_stream(server.url, "/x", b"2", {})
    assert [r.body for r in server.requests] == [b"1", b"2"]  # the server saw the POST once


async def test_a_get_is_resent_on_a_fresh_connection_when_a_reused_one_closes() -> None:
    async with _closes_the_second_request_on_each_connection() as server, _client() as client:
        assert (await client.request("GET", server.url + "/a")).content == b"ok"
        assert (await client.request("GET", server.url + "/b")).content == b"ok"
    assert [(r.target, r.connection) for r in server.requests] == [("/a", 0), ("/b", 0), ("/b", 1)]


# TLS with a self-signed certificate.


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("openssl is needed for the TLS tests (.ci/run installs it)")
        pytest.skip("no openssl to make a self-signed certificate with")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost,DNS:upstream.test,IP:127.0.0.1"],
        check=True, capture_output=True,
    )
    return cert, key


def _server_tls(certificate: tuple[Path, Path]) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(*certificate)
    return context


async def test_https_uses_the_clients_ca_and_keeps_the_connection(
    certificate: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    async with RawServer(_echo, ssl_context=_server_tls(certificate)) as server:
        async with _client(verify=str(certificate[0])) as client:
            for body in (b"1", b"2"):
                response = await client.post_stream(server.url, "/x", body, {})
                assert await response.aread() == body + b"|127.0.0.1:%d" % server.port
        assert [r.connection for r in server.requests] == [0, 0]
        async with _client() as strict:  # the default CAs do not know this certificate
            with fails_with(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                await strict.post_stream(server.url, "/x", b"", {})
        async with _client(verify=False) as lax:
            assert (await lax.request("GET", server.url + "/x")).status_code == 200
        monkeypatch.setenv("SSL_CERT_FILE", str(certificate[0]))
        async with _client() as configured:  # the default, told of the CA by the environment
            assert (await configured.request("GET", server.url + "/x")).status_code == 200


async def test_https_counts_against_the_connection_limit_and_its_timeouts(
    certificate: tuple[Path, Path],
) -> None:
    def script(request: RawRequest) -> bytes:
        if request.target == "/head-only":
            return b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n12"  # the rest never comes
        return answer(b"ok")

    async with RawServer(script, ssl_context=_server_tls(certificate)) as server:
        transport = FastTransport(max_connections=1, verify=str(certificate[0]), proxies=NO_PROXIES)
        timeout = Timeouts(0.5, 0.5, 0.2)
        async with LeanClient(timeouts=timeout, transport=transport) as client:
            held = await client.post_stream(server.url, "/head-only", b"", {})
            with fails_with(httpx.PoolTimeout):
                await client.post_stream(server.url, "/x", b"", {})
            with fails_with(httpx.ReadTimeout):
                await held.aread()
            response = await client.post_stream(server.url, "/x", b"", {})
            assert await response.aread() == b"ok"


# Forward proxies from the environment.


async def test_http_upstreams_go_through_http_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    async with RawServer(_echo) as server, ForwardProxy() as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.url.replace("://", "://user:p%40ss@"))
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        monkeypatch.delenv("http_proxy", raising=False)
        # upstream.test resolves nowhere: only the proxy (which maps it to 127.0.0.1) can answer
        url = f"http://upstream.test:{server.port}/v1/x?q=1"
        async with upstream_client(read_timeout_s=10, connect_timeout_s=5) as client:
            response = await client.post_stream(url, "", b"hi", {})
            assert await response.aread() == b"hi|upstream.test:%d" % server.port
            assert (await client.request("GET", url)).content == b"|upstream.test:%d" % server.port
    assert proxy.seen == [f"POST {url}", f"GET {url}"]
    assert proxy.auth == ["Basic dXNlcjpwQHNz"] * 2  # user:p@ss
    assert [r.target for r in server.requests] == ["/v1/x?q=1"] * 2


async def test_https_upstreams_tunnel_through_https_proxy(
    monkeypatch: pytest.MonkeyPatch, certificate: tuple[Path, Path]
) -> None:
    async with RawServer(_echo, ssl_context=_server_tls(certificate)) as server:
        async with ForwardProxy() as proxy:
            monkeypatch.setenv("https_proxy", proxy.url)
            monkeypatch.delenv("no_proxy", raising=False)
            monkeypatch.delenv("NO_PROXY", raising=False)
            url = f"https://upstream.test:{server.port}/x"
            async with upstream_client(
                read_timeout_s=10, connect_timeout_s=5, verify=str(certificate[0])
            ) as client:
                for body in (b"1", b"2"):
                    response = await client.post_stream(url, "", body, {})
                    expected = body + b"|upstream.test:%d" % server.port
                    assert await response.aread() == expected
    assert proxy.seen == [f"CONNECT upstream.test:{server.port}"]  # one tunnel, kept alive


async def test_a_refused_tunnel_is_a_proxy_error(monkeypatch: pytest.MonkeyPatch) -> None:
    async with ForwardProxy(refuse_tunnels=True) as proxy:
        monkeypatch.setenv("https_proxy", proxy.url)
        monkeypatch.delenv("no_proxy", raising=False)
        monkeypatch.delenv("NO_PROXY", raising=False)
        async with _client(max_connections=1, proxies=Proxies.from_env()) as client:
            with fails_with(httpx.ProxyError, match="403 Forbidden"):
                await client.post_stream("https://upstream.test:1", "/x", b"", {})
            with fails_with(httpx.ProxyError):  # the permit came back: not a PoolTimeout
                await client.post_stream("https://upstream.test:1", "/x", b"", {})


def test_no_proxy_and_loopback_go_direct() -> None:
    proxies = Proxies.from_env(
        {
            "HTTP_PROXY": "proxy:3128",
            "https_proxy": "http://p:1",
            "NO_PROXY": "internal,.corp,10.0.0.0/8,api.x:8443",
        }
    )
    routed = {
        url: proxies.for_url(httpx.URL(url)) is not None
        for url in (
            "http://gpu1:30000", "http://internal:1", "http://a.internal:1", "http://a.corp",
            "http://10.1.2.3:30000", "http://11.1.2.3", "https://api.x:8443", "https://api.x",
            "http://127.0.0.1:30000", "http://[::1]:30000", "http://localhost:1",
        )
    }
    assert routed == {
        "http://gpu1:30000": True, "http://internal:1": False, "http://a.internal:1": False,
        "http://a.corp": False, "http://10.1.2.3:30000": False, "http://11.1.2.3": True,
        "https://api.x:8443": False, "https://api.x": True, "http://127.0.0.1:30000": False,
        "http://[::1]:30000": False, "http://localhost:1": False,
    }
    assert Proxies.from_env({"http_proxy": "http://p:1", "NO_PROXY": "*"}).for_url(
        httpx.URL("http://gpu1")
    ) is None
    with pytest.raises(ConfigError, match="only http:// forward proxies"):
        Proxies.from_env({"HTTPS_PROXY": "socks5://p:1080"})


# The body bound.


async def test_a_body_over_the_bound_is_refused_without_buffering_it() -> None:
    big = b"x" * 3_000_000
    bomb = gzip.compress(b"\0" * 5_000_000)

    def script(request: RawRequest) -> bytes:
        if request.target == "/declared":
            return answer(big)
        if request.target == "/gzip":
            return answer(bomb, headers="content-encoding: gzip\r\n")
        if request.target == "/undeclared":  # no length to check up front
            return b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n" + big
        return answer(b"fine")

    async with RawServer(script) as server, _client(max_body_bytes=1_000_000) as client:
        for path in ("/declared", "/undeclared", "/gzip"):
            response = await client.post_stream(server.url, path, b"", {})
            with pytest.raises(UpstreamBodyTooLarge, match="over 1000000 bytes"):
                await response.aread()
        response = await client.post_stream(server.url, "/ok", b"", {})  # still usable
        assert await response.aread() == b"fine"


async def test_interim_1xx_answers_are_skipped_and_the_connection_stays_in_step() -> None:
    """A 103 Early Hints (or 100 Continue) before the answer is not the answer: the
    final response is read, and the next request on the kept connection gets its own."""

    def script(request: RawRequest) -> bytes:
        hints = b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"
        return hints + b"HTTP/1.1 100 Continue\r\n\r\n" + answer(request.body)

    async with RawServer(script) as server, _client() as client:
        for body in (b"one", b"two", b"three"):
            response = await client.post_stream(server.url, "/x", body, {})
            assert response.status_code == 200
            assert "link" not in response.headers
            assert await response.aread() == body
        assert (await client.request("GET", server.url + "/x")).status_code == 200
    assert [r.connection for r in server.requests] == [0, 0, 0, 0]


async def test_endless_interim_answers_are_a_protocol_error() -> None:
    def script(request: RawRequest) -> bytes:
        return b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n" * 100 + answer(b"late")

    async with RawServer(script) as server, _client() as client:
        with fails_with(httpx.TransportError, match="interim"):
            await client.post_stream(server.url, "/x", b"{}", {})


async def test_an_early_hint_sent_apart_is_not_taken_for_the_answer() -> None:
    """The 103 arrives alone, the answer 50 ms later (as a real server flushes hints)."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                body = await reader.readexactly(length)
                writer.write(b"HTTP/1.1 103 Early Hints\r\nLink: </a>; rel=preload\r\n\r\n")
                await writer.drain()
                await asyncio.sleep(0.05)
                writer.write(answer(b"re:" + body))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/x"
    try:
        async with _client() as client:
            for body in (b"one", b"two"):
                response = await client.post_stream(url, "", body, {})
                assert response.status_code == 200
                assert await response.aread() == b"re:" + body
    finally:
        server.close()
