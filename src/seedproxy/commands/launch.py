"""``seedproxy launch``: one deterministic SGLang server per GPU (or per TP group),
then the proxy in front of them, in this process. An attention backend that SGLang's
``--enable-deterministic-inference`` refuses (not in ``DETERMINISTIC_ATTENTION``) is
refused before anything starts.

Each server runs in its own process group (a terminal's Ctrl-C reaches only the
launcher, which stops them in order) with ``CUDA_VISIBLE_DEVICES`` set to its GPUs.
The proxy starts once every server's ``/health`` answers 200; if one exits first, the
launch fails. SIGINT and SIGTERM stop the proxy, then every server (SIGTERM to its
group, SIGKILL after a grace period).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from ..errors import ConfigError

__all__ = ["DETERMINISTIC_ATTENTION", "LaunchPlan", "ServerSpec", "launch", "parse_gpus",
           "plan_servers", "sglang_command"]

log = logging.getLogger("seedproxy.launch")

SERVER_HOST = "127.0.0.1"
DETERMINISTIC_ATTENTION = ("fa3", "fa4", "flashinfer", "triton", "ascend", "intel_xpu")


def sglang_args(model_path: str, *, attention_backend: str | None = None,
                tp: int | None = None, host: str | None = None, port: int | None = None,
                extra: Sequence[str] = ()) -> list[str]:
    """The arguments after ``python -m sglang.launch_server``, in a fixed order:
    model, determinism, attention backend, tp, host, port, then ``extra`` verbatim."""
    if not model_path:
        raise ConfigError("--model-path must not be empty")
    if tp is not None and tp < 1:
        raise ConfigError(f"--tp must be at least 1, got {tp}")
    if port is not None and not 0 < port < 65536:
        raise ConfigError(f"--port must be between 1 and 65535, got {port}")
    if attention_backend is not None and attention_backend not in DETERMINISTIC_ATTENTION:
        raise ConfigError(f"attention backend {attention_backend!r} is not supported by "
                          "SGLang's deterministic inference; use one of "
                          f"{', '.join(DETERMINISTIC_ATTENTION)} (or none, and SGLang picks one)")
    args = ["--model-path", model_path, "--enable-deterministic-inference"]
    for flag, value in (("--attention-backend", attention_backend), ("--tp", tp),
                        ("--host", host), ("--port", port)):
        if value is not None:
            args += [flag, str(value)]
    return args + list(extra)


def sglang_command(args: Sequence[str], python: str = "python") -> list[str]:
    return [python, "-m", "sglang.launch_server", *args]


def warn_attention_backend(backend: str | None) -> None:
    """After ``sglang_args`` checked it."""
    if backend == "flashinfer":
        print("seedproxy: warning: SGLang disables the radix (prefix) cache with "
              "--attention-backend flashinfer in deterministic mode, so shared prefixes "
              "are recomputed; fa3, fa4 and triton keep it", file=sys.stderr)


@dataclass(frozen=True, slots=True)
class ServerSpec:
    gpus: tuple[str, ...]
    port: int
    argv: tuple[str, ...]

    @property
    def url(self) -> str:
        return f"http://{SERVER_HOST}:{self.port}"

    def env(self, base: dict[str, str]) -> dict[str, str]:
        return {**base, "CUDA_VISIBLE_DEVICES": ",".join(self.gpus)}


@dataclass(frozen=True, slots=True)
class LaunchPlan:
    servers: tuple[ServerSpec, ...]

    @property
    def urls(self) -> list[str]:
        return [s.url for s in self.servers]


def parse_gpus(text: str) -> list[str]:
    """``"0,1,2,3"`` -> ["0", "1", "2", "3"]; ids or UUIDs, no blanks, no repeats."""
    gpus = [g.strip() for g in text.split(",")]
    if not text.strip() or any(not g or " " in g for g in gpus):
        raise ConfigError(f"--gpus must be a comma-separated list of GPU ids, got {text!r}")
    repeated = sorted({g for g in gpus if gpus.count(g) > 1})
    if repeated:
        raise ConfigError(f"--gpus lists GPU {repeated[0]} more than once")
    return gpus


def plan_servers(model_path: str, gpus: Sequence[str], *, tp: int = 1,
                 attention_backend: str | None = None, base_port: int = 30000,
                 extra: Sequence[str] = (), python: str = sys.executable) -> LaunchPlan:
    """Group ``gpus`` in runs of ``tp`` (in order) and give each group a server on
    ``base_port + i`` (or a free port each when ``base_port`` is 0)."""
    if tp < 1:
        raise ConfigError(f"--tp must be at least 1, got {tp}")
    if not gpus or len(gpus) % tp:
        raise ConfigError(f"--gpus lists {len(gpus)} GPUs, which is not a multiple of --tp {tp}")
    if not 0 <= base_port < 65536:
        raise ConfigError(f"--base-port must be between 0 and 65535, got {base_port}")
    servers = []
    for i in range(len(gpus) // tp):
        port = _free_port() if base_port == 0 else base_port + i
        if port > 65535:
            raise ConfigError(f"--base-port {base_port} leaves no port for server {i}")
        args = sglang_args(model_path, attention_backend=attention_backend, tp=tp,
                           host=SERVER_HOST, port=port, extra=extra)
        group = tuple(gpus[i * tp : (i + 1) * tp])
        servers.append(ServerSpec(group, port, tuple(sglang_command(args, python))))
    return LaunchPlan(tuple(servers))


def launch(plan: LaunchPlan, serve: Callable[[list[str]], int], *,
           health_timeout_s: float) -> int:
    """Start ``plan``'s servers, wait for them, run ``serve(urls)``, and stop the
    servers however it ends (SIGTERM meanwhile raises KeyboardInterrupt, so it does)."""

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for spec in plan.servers:
            log.info("starting SGLang on GPUs %s: %s", ",".join(spec.gpus), " ".join(spec.argv))
            procs.append(subprocess.Popen(
                list(spec.argv), env=spec.env(dict(os.environ)), start_new_session=True,
                preexec_fn=_die_with_parent if sys.platform == "linux" else None))
        _wait_healthy(dict(zip(plan.servers, procs, strict=True)), health_timeout_s)
        return serve(plan.urls)
    finally:
        _stop(procs)
        signal.signal(signal.SIGTERM, previous)


def _wait_healthy(waiting: dict[ServerSpec, subprocess.Popen[bytes]], timeout_s: float) -> None:
    """Return once every server's /health answers 200; ``ConfigError`` if one exits
    first or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    with httpx.Client(timeout=2.0) as client:
        while waiting:
            for spec, proc in list(waiting.items()):
                code = proc.poll()
                if code is not None:
                    raise ConfigError(
                        f"SGLang server on GPUs {','.join(spec.gpus)} exited with code "
                        f"{code} before {spec.url}/health answered")
                if _healthy(client, spec.url):
                    log.info("SGLang on GPUs %s is ready at %s", ",".join(spec.gpus), spec.url)
                    del waiting[spec]
            if waiting and time.monotonic() > deadline:
                names = ", ".join(s.url for s in waiting)
                raise ConfigError(f"SGLang servers not healthy after {timeout_s:g}s: {names}")
            if waiting:
                time.sleep(0.5)


def _stop(procs: list[subprocess.Popen[bytes]], grace_s: float = 30.0) -> None:
    """SIGTERM every server's process group, wait, then SIGKILL what is left."""
    for proc in procs:
        _signal_group(proc, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for proc in procs:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _signal_group(proc, signal.SIGKILL)
            proc.wait()


def require_sglang(python: str) -> None:
    """``ConfigError`` unless ``python`` can import ``sglang`` (checked before any server
    starts, not after a health timeout)."""
    probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('sglang') is None)"
    try:
        found = subprocess.run([python, "-c", probe], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigError(f"cannot run --python {python}: {exc}") from None
    if found.returncode != 0:
        raise ConfigError(f"sglang is not installed for {python}: on a GPU host, "
                          "pip install -e '.[sglang]' (or pass --python with a Python "
                          "that has sglang)")


def _healthy(client: httpx.Client, url: str) -> bool:
    try:
        return client.get(url + "/health").status_code == 200
    except httpx.HTTPError:
        return False


def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):  # exited since poll()
        os.killpg(proc.pid, sig)


def _die_with_parent() -> None:
    """In the child, before exec: get SIGTERM when the launcher dies, even by SIGKILL."""
    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((SERVER_HOST, 0))
        return int(sock.getsockname()[1])
