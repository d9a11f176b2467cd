"""Liveness, readiness and start-up: ``/healthz`` stays 200 while ``/readyz`` says
whether an upstream answers; a dead upstream is warned about at start; a port in use
is one line and exit 2, never preceded by "listening"; a blank admin key is refused."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from seedproxy.commands.cli import main
from tests.conftest import Fake
from tests.helpers.procs import free_port, start_seedproxy
from tests.helpers.serving import Serving


def test_readyz_is_200_with_an_upstream_up(fake: Fake, start_proxy: Callable[..., str]) -> None:
    proxy = start_proxy([fake.url])
    ready = httpx.get(f"{proxy}/readyz")
    assert ready.status_code == 200
    assert ready.json() == {
        "ready": True,
        "upstreams": [{"url": fake.url, "up": True, "degraded": False, "reason": None}],
        "store": {"up": True, "reason": None},
    }


def test_readyz_is_503_with_reasons_when_no_upstream_answers(
    fake: Fake, start_proxy: Callable[..., str]
) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    proxy = start_proxy([dead])
    assert httpx.get(f"{proxy}/healthz").status_code == 200  # alive, though not ready
    answer = httpx.get(f"{proxy}/readyz")
    assert answer.status_code == 503
    (upstream,) = answer.json()["upstreams"]
    assert (upstream["url"], upstream["up"]) == (dead, False)
    assert "ConnectError" in upstream["reason"]
    both = start_proxy([dead, fake.url], health_interval_s=60)
    assert httpx.get(f"{both}/readyz").status_code == 200


def test_start_up_warns_when_no_upstream_answers(tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    served = Serving("--upstream", dead, log=tmp_path / "serve.log")
    try:
        served.wait()
        assert dead in served.line("no upstream answers", timeout_s=60).string
    finally:
        served.stop()


def test_a_port_in_use_is_one_line_and_exit_2_without_listening() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = start_seedproxy("serve", "--upstream", "http://127.0.0.1:9", "--port", str(port),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    lines = err.decode().strip().splitlines()
    assert len(lines) == 1, lines
    assert f"cannot listen on 127.0.0.1:{port}" in lines[0] and "listening" not in lines[0]
    assert out == b""


@pytest.mark.parametrize("key", ["", "   ", "\t", " padded "])
def test_a_blank_or_padded_admin_key_is_refused_at_start(
    key: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", "--upstream", "http://127.0.0.1:9", "--admin-key", key,
                 "--port", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "admin_key" in err[0], err
