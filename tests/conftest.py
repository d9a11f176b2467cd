"""Shared fixtures: real servers on 127.0.0.1 (a fake SGLang and the proxy, under
uvicorn), and real clients."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import httpx._config
import pytest

from seedproxy.proxy import create_app
from seedproxy.settings import Settings
from tests.helpers.fake_sglang import Switches, create_fake_sglang
from tests.helpers.fleet import Fleet
from tests.helpers.redis_sentinel import SentinelSet
from tests.helpers.redis_server import RedisServer, redis_or_skip
from tests.helpers.servers import ServerThread

# httpx's calls default to a 5 s timeout (one shared ``Timeout``, bound as every default
# argument). Under ``pytest -n 4`` on 2 cores a real server can stall that long, and a
# test then fails on scheduling luck: its defaults wait 60 s here. A test that means a
# short wait passes its own timeout.
for _name in ("connect", "read", "write", "pool"):
    setattr(httpx._config.DEFAULT_TIMEOUT_CONFIG, _name, 60.0)


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


@pytest.fixture
def fleet() -> Iterator[Fleet]:
    """Three fake SGLang servers, each its own switches and journal."""
    fleet = Fleet(3)
    yield fleet
    fleet.close()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """A real redis-server on a free loopback port (fails under CI=true if missing)."""
    server = RedisServer(redis_or_skip())
    yield server
    server.stop()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """A store URL with a key prefix of its own, so tests never see each other's keys."""
    return f"{redis_server.url}?prefix=t{uuid.uuid4().hex[:12]}:"


@pytest.fixture(scope="session")
def sentinel_servers() -> Iterator[SentinelSet]:
    """A primary, one replica and one Sentinel (fails under CI=true if missing)."""
    servers = SentinelSet(replicas=1, sentinels=1)
    yield servers
    servers.stop()


@pytest.fixture
def sentinel_url(sentinel_servers: SentinelSet) -> str:
    """A store URL through the Sentinel, every write held by the replica (``WAIT 1``)."""
    return sentinel_servers.url(f"prefix=t{uuid.uuid4().hex[:12]}:&wait_replicas=1")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Name every group of skipped tests, with its reason and size, at the end of the
    run, so that a missing system package (redis-server, chromium and chromium-driver,
    openssl, node and npm: see the README's test paragraph) never hides behind a green
    line. Under ``CI=true`` those groups fail instead of skipping."""
    groups: dict[str, int] = {}
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        reason = reason.removeprefix("Skipped: ")
        groups[reason] = groups.get(reason, 0) + 1
    if not groups:
        return
    terminalreporter.section("skipped groups (not tested on this machine)", yellow=True)
    for reason, count in sorted(groups.items(), key=lambda item: (-item[1], item[0])):
        terminalreporter.write_line(f"{count:5d} skipped: {reason}")
    terminalreporter.write_line(
        "Install what they name (README, Test; .ci/run installs them all) to run them."
    )
