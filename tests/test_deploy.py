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

from seedproxy.commands.launch import DETERMINISTIC_ATTENTION
from tests.helpers.procs import free_port, seedproxy_env

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


# Kubernetes (deploy/k8s, kustomize): checked against the Kubernetes schemas that
# kubernetes-validate ships (offline), and against seedproxy's own command lines.
K8S = ROOT / "deploy" / "k8s"


@pytest.fixture
def k8s() -> dict[tuple[str, str], dict[str, Any]]:
    """Every resource kustomization.yaml lists, by (kind, name)."""
    yaml = pytest.importorskip("yaml")
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    listed = kustomization["resources"]
    assert sorted(listed) == sorted(p.name for p in K8S.glob("*.yaml")
                                    if p.name != "kustomization.yaml")
    docs = [doc for name in listed for doc in yaml.safe_load_all((K8S / name).read_text())]
    return {(doc["kind"], doc["metadata"]["name"]): doc for doc in docs}


def container(resource: dict[str, Any]) -> dict[str, Any]:
    (only,) = resource["spec"]["template"]["spec"]["containers"]
    return only  # type: ignore[no-any-return]


def test_every_manifest_is_valid_kubernetes_and_a_broken_one_is_not(
    k8s: dict[tuple[str, str], dict[str, Any]],
) -> None:
    import kubernetes_validate

    versions = ("1.29", kubernetes_validate.latest_version())
    for resource in k8s.values():
        for version in versions:
            kubernetes_validate.validate(resource, version, strict=True)
    broken = json.loads(json.dumps(k8s["Deployment", "seedproxy"]))
    broken["spec"]["replica"] = broken["spec"].pop("replicas")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, versions[0], strict=True)


def test_the_proxy_manifest_names_real_serve_options_and_the_services_it_needs(
    k8s: dict[tuple[str, str], dict[str, Any]], monkeypatch: pytest.MonkeyPatch,
) -> None:
    from seedproxy.commands.cli import build_parser
    from seedproxy.commands.options import flag_values
    from seedproxy.sessions.store.redis_url import parse_url
    from seedproxy.settings import load_settings

    proxy = container(k8s["Deployment", "seedproxy"])
    monkeypatch.setenv("SEEDPROXY_ADMIN_KEY", "k" * 32)
    settings = load_settings(flag_values(build_parser().parse_args(["serve", *proxy["args"]])))
    (env,) = proxy["env"]
    assert env["name"] == "SEEDPROXY_ADMIN_KEY" and "secretKeyRef" in env["valueFrom"]
    assert proxy["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert proxy["livenessProbe"]["httpGet"]["path"] == "/healthz"
    port = {p["name"]: p["containerPort"] for p in proxy["ports"]}["http"]
    assert settings.port == port and settings.host == "0.0.0.0"

    store = parse_url(settings.store)
    assert store.wait_replicas >= 1
    ((host, sentinel_port),) = store.sentinels
    assert k8s["Service", host]["spec"]["ports"][0]["port"] == sentinel_port
    config = k8s["ConfigMap", "redis-sentinel"]["data"]["sentinel.conf"]
    assert f"sentinel monitor {store.service} redis-0.redis 6379 " in config
    assert k8s["StatefulSet", "redis"]["spec"]["replicas"] > store.wait_replicas

    servers = sorted(name for kind, name in k8s if kind == "Deployment"
                     and name.startswith("sglang-"))
    assert settings.upstream == [f"http://{name}:30000" for name in servers]
    for name in servers:
        assert k8s["Service", name]["spec"]["ports"][0]["port"] == 30000


def test_each_sglang_server_runs_what_sglang_command_prints(
    k8s: dict[tuple[str, str], dict[str, Any]],
) -> None:
    servers = [doc for (kind, name), doc in k8s.items()
               if kind == "Deployment" and name.startswith("sglang-")]
    assert len(servers) >= 2
    for server in servers:
        assert server["spec"]["replicas"] == 1
        spec = container(server)
        argv = [*spec["command"], *spec["args"]]
        model = argv[argv.index("--model-path") + 1]
        printed = subprocess.run(
            [sys.executable, "-m", "seedproxy", "sglang-command", "--model-path", model,
             "--attention-backend", "fa3", "--port", "30000", "--", "--host", "0.0.0.0"],
            capture_output=True, text=True, check=True, env=seedproxy_env()).stdout.split()
        assert argv[0] == "python3" and argv[1:] == printed[1:]
        assert spec["readinessProbe"]["httpGet"]["path"] == "/health"
        assert spec["resources"]["limits"]["nvidia.com/gpu"] == 1
