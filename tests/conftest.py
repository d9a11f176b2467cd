"""Shared fixtures: real servers on 127.0.0.1 (a fake SGLang and the proxy, under
uvicorn), and real clients."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from seedproxy.proxy import create_app
from seedproxy.settings import Settings
from tests.helpers.fake_sglang import Switches, create_fake_sglang
from tests.helpers.servers import ServerThread


class Fake:
    def __init__(self, server: ServerThread, switches: Switches) -> None:
        self.server = server
        self.switches = switches

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def received(self) -> list[dict[str, Any]]:
        return self.switches.received


@pytest.fixture
def fake() -> Iterator[Fake]:
    switches = Switches()
    with ServerThread(create_fake_sglang(switches)) as server:
        yield Fake(server, switches)


@pytest.fixture
def start_proxy() -> Iterator[Callable[..., str]]:
    """Start a proxy in front of ``upstreams`` with ``Settings`` overrides; returns its URL."""
    servers: list[ServerThread] = []

    def start(upstreams: list[str], **overrides: Any) -> str:
        app_kwargs = overrides.pop("_app", {})
        settings = Settings(upstream=upstreams, **overrides)
        server = ServerThread(create_app(settings, **app_kwargs)).start()
        servers.append(server)
        return server.url

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def proxy(fake: Fake, start_proxy: Callable[..., str]) -> str:
    return start_proxy([fake.url])


@pytest.fixture
def http(proxy: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=proxy, timeout=30) as client:
        yield client
