"""The Dockerfile and deploy/compose.yaml, checked by reading them (Docker cannot
run here), plus the image's healthcheck command run for real against a proxy."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from seedproxy.commands.sglang import DETERMINISTIC_ATTENTION
from tests.helpers.procs import free_port

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = (ROOT / "Dockerfile").read_text()


def instruction(name: str) -> str:
    """The text of the one ``name`` instruction, continuation lines joined."""
    joined = re.sub(r"\\\n\s*", " ", DOCKERFILE)
    (line,) = [ln for ln in joined.splitlines() if ln.startswith(name + " ")]
    return line[len(name) + 1 :].strip()


def test_the_image_is_slim_non_root_core_only_and_serves() -> None:
    assert instruction("FROM") == "python:3.11-slim"
    user = instruction("USER").split(":")[0]
    assert user.isdigit() and int(user) != 0
    assert json.loads(instruction("ENTRYPOINT")) == ["seedproxy", "serve"]
    assert instruction("EXPOSE") == "8000"
    install = instruction("RUN")
    assert "'.[redis]'" in install and "torch" not in install and "engine" not in install


def healthcheck_code() -> str:
    command = json.loads(instruction("HEALTHCHECK").split("CMD", 1)[1])
    assert command[:2] == ["python", "-c"]
    return str(command[2])


def test_the_image_healthcheck_passes_on_a_live_proxy_and_fails_on_a_dead_port(proxy: str) -> None:
    code = healthcheck_code()
    assert "/healthz" in code
    port = proxy.rsplit(":", 1)[1]
    live = subprocess.run(
        [sys.executable, "-c", code], env={"SEEDPROXY_PORT": port}, capture_output=True
    )
    assert live.returncode == 0
    dead = subprocess.run(
        [sys.executable, "-c", code], env={"SEEDPROXY_PORT": str(free_port())}, capture_output=True
    )
    assert dead.returncode != 0


@pytest.fixture
def compose() -> dict[str, Any]:
    yaml = pytest.importorskip("yaml")
    return yaml.safe_load((ROOT / "deploy" / "compose.yaml").read_text())  # type: ignore[no-any-return]


def test_compose_runs_deterministic_sglang_servers_on_distinct_gpus(
    compose: dict[str, Any],
) -> None:
    sglang = {k: v for k, v in compose["services"].items() if k.startswith("sglang-")}
    assert len(sglang) >= 2
    gpus = []
    for service in sglang.values():
        assert service["image"].startswith("lmsysorg/sglang:")
        args = service["command"].split()
        assert args[:3] == ["python3", "-m", "sglang.launch_server"]
        assert "--enable-deterministic-inference" in args
        backend = args[args.index("--attention-backend") + 1]
        default = re.fullmatch(r"\$\{ATTENTION_BACKEND:-(\w+)\}", backend)
        assert default and default.group(1) in DETERMINISTIC_ATTENTION
        (device,) = service["deploy"]["resources"]["reservations"]["devices"]
        assert device["capabilities"] == ["gpu"]
        gpus += device["device_ids"]
    assert len(set(gpus)) == len(gpus) == len(sglang)


def test_compose_puts_seedproxy_in_front_of_every_server_with_redis(
    compose: dict[str, Any],
) -> None:
    services = compose["services"]
    proxy = services["seedproxy"]
    args = proxy["command"]
    upstreams = [args[i + 1] for i, a in enumerate(args) if a == "--upstream"]
    assert upstreams == [f"http://{name}:30000" for name in services if name.startswith("sglang-")]
    assert args[args.index("--store") + 1] == "redis://redis:6379/0"
    assert "SEEDPROXY_ADMIN_KEY" in proxy["environment"]
    assert set(proxy["depends_on"]) == {*(n for n in services if n.startswith("sglang-")), "redis"}
