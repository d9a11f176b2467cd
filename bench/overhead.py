"""Overhead benchmark: the same load against a fast fake upstream directly, through a
bare pass-through proxy (``bench/passthrough.py``: the same uvicorn stack and HTTP client as
seedproxy, nothing else: the floor a Python proxy cannot go below), through seedproxy
(sessions, deterministic seeds and capture on) and through LiteLLM proxy.

    python bench/overhead.py [--quick] [--out bench/results/overhead.json]

Targets are interleaved (direct, seedproxy, litellm, direct, ...) and every figure is
the median over rounds, so a noisy shared machine moves all three alike; ratios are
taken within the same run. LiteLLM runs from its own venv (bench/.litellm-venv,
installed on first use); where it cannot install or start it is skipped with a message.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import os
import platform
import shlex
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rawhttp import RawConnection, build_request  # noqa: E402

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
LITELLM_VENV = BENCH / ".litellm-venv"
MASTER_KEY = "sk-bench-master"
MODEL = "bench-model"
CONCURRENCY = (1, 16, 64)


@dataclass
class Profile:
    rounds: int
    seq: int
    stream: int
    rps_s: float
    warmup: int


FULL = Profile(rounds=5, seq=300, stream=80, rps_s=2.0, warmup=100)
QUICK = Profile(rounds=2, seq=100, stream=30, rps_s=1.0, warmup=40)


@dataclass
class Target:
    name: str
    port: int
    proc: subprocess.Popen[bytes] | None = None
    sessions: bool = False
    headers: dict[str, str] = field(default_factory=dict)
    runs: int = 0
    results: dict[str, list[float]] = field(default_factory=dict)
    cpu_per_req_us: list[float] = field(default_factory=list)
    rss_start_mb: float | None = None
    served: int = 0

    def path(self, conn: int) -> str:
        if self.sessions:
            return f"/sessions/bench-{self.runs}-{conn}/v1/chat/completions"
        return "/v1/chat/completions"

    def request(self, conn: int, *, stream: bool) -> bytes:
        body = json.dumps(
            {
                "model": MODEL,
                "messages": [
                    {"role": "system", "content": "You are a benchmark."},
                    {"role": "user", "content": "Say something short."},
                ],
                "max_tokens": 32,
                "temperature": 1.0,
                "stream": stream,
            }
        ).encode()
        return build_request("127.0.0.1", self.port, "POST", self.path(conn), body, self.headers)

    def add(self, key: str, value: float) -> None:
        self.results.setdefault(key, []).append(value)


# ---------------------------------------------------------------- processes


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_http(
    url: str, proc: subprocess.Popen[bytes], timeout_s: float, headers: dict[str, str] | None = None
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"exited with {proc.returncode} before {url} answered")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=1.0, headers=headers).status_code == 200:
                return
        time.sleep(0.2)
    raise TimeoutError(f"{url} did not answer within {timeout_s:.0f}s")


def stop(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _affinity(cpu: int | None) -> Any:
    if cpu is None:
        return None
    return lambda: os.sched_setaffinity(0, {cpu})


def start_upstream(workdir: Path, cpu: int | None) -> Target:
    port = free_port()
    cmd = [sys.executable, str(BENCH / "fake_upstream.py"), "--port", str(port)]
    if cpu is not None:
        cmd += ["--cpu", str(cpu)]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=open(workdir / "upstream.log", "wb")
    )
    wait_http(f"http://127.0.0.1:{port}/health", proc, 30)
    return Target("direct", port, proc)


def start_seedproxy(upstream: Target, workdir: Path, extra: list[str], cpu: int | None) -> Target:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEEDPROXY_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")]).rstrip(
        os.pathsep
    )
    cmd = [
        sys.executable,
        "-m",
        "seedproxy",
        "serve",
        "--upstream",
        f"http://127.0.0.1:{upstream.port}",
        "--port",
        str(port),
        "--deterministic",
        *extra,
    ]
    # The per-request JSON log line goes to a file, as a deployment would keep it.
    proc = subprocess.Popen(
        cmd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(workdir / "seedproxy.log", "wb"),
        preexec_fn=_affinity(cpu),
    )
    wait_http(f"http://127.0.0.1:{port}/healthz", proc, 60)
    target = Target("seedproxy", port, proc, sessions=True)
    _check_seedproxy(target)
    return target


def _check_seedproxy(target: Target) -> None:
    """Make sure the proxy does the work being measured: a seed and a recorded capture."""
    base = f"http://127.0.0.1:{target.port}"
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
    answer = httpx.post(f"{base}/sessions/bench-check/v1/chat/completions", json=body, timeout=10)
    answer.raise_for_status()
    if "x-seedproxy-seed" not in answer.headers:
        raise RuntimeError("seedproxy answered without x-seedproxy-seed: deterministic mode is off")
    trajectory = httpx.get(f"{base}/sessions/bench-check/trajectory", timeout=10).json()
    first = trajectory["interactions"][0]
    if not first.get("completion_token_ids"):
        raise RuntimeError("seedproxy recorded no token ids: capture is off")


def start_floor(upstream: Target, workdir: Path, client: str, cpu: int | None) -> Target:
    """The bare pass-through proxy with ``client``, started like the others."""
    port = free_port()
    cmd = [sys.executable, str(BENCH / "passthrough.py"), "--client", client,
           "--port", str(port), "--upstream", f"http://127.0.0.1:{upstream.port}/v1/chat/completions"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL,
                            stderr=open(workdir / "passthrough.log", "wb"),
                            preexec_fn=_affinity(cpu))
    wait_http(f"http://127.0.0.1:{port}/", proc, 30)
    return Target("passthrough", port, proc)


def ensure_litellm() -> Path | None:
    """The venv's ``litellm`` executable, installing it on first use; None (with a
    message) where it cannot be installed."""
    exe = LITELLM_VENV / "bin" / "litellm"
    if exe.exists():
        return exe
    print(f"installing litellm[proxy] into {LITELLM_VENV} (first run only)...", flush=True)
    python = shutil.which("python3") or sys.executable
    try:
        subprocess.run([python, "-m", "venv", str(LITELLM_VENV)], check=True)
        subprocess.run(
            [str(LITELLM_VENV / "bin" / "pip"), "install", "-q", "litellm[proxy]"],
            check=True,
            timeout=1200,
        )
    except (subprocess.SubprocessError, OSError) as exc:
        print(f"SKIP litellm: could not install litellm[proxy] ({exc})", flush=True)
        return None
    return exe if exe.exists() else None


def start_litellm(upstream: Target, workdir: Path, cpu: int | None,
                  models: tuple[str, ...] = (MODEL,)) -> Target | None:
    """LiteLLM proxy routing each of ``models`` to the same name upstream."""
    exe = ensure_litellm()
    if exe is None:
        return None
    port = free_port()
    config = workdir / "litellm.yaml"
    config.write_text(
        "model_list:\n"
        + "".join(
            f"  - model_name: {model}\n"
            "    litellm_params:\n"
            f"      model: openai/{model}\n"
            f"      api_base: http://127.0.0.1:{upstream.port}/v1\n"
            "      api_key: sk-fake-upstream\n"
            for model in models)
        + "litellm_settings:\n"
        "  drop_params: true\n"
        "  telemetry: false\n"
        "general_settings:\n"
        f"  master_key: {MASTER_KEY}\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "PYTHONPATH")}
    env.update(
        LITELLM_MASTER_KEY=MASTER_KEY,
        LITELLM_LOCAL_MODEL_COST_MAP="True",
        LITELLM_LOG="ERROR",
        LITELLM_TELEMETRY="False",
        DISABLE_SCHEMA_UPDATE="True",
    )
    cmd = [
        str(exe),
        "--config",
        str(config),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--num_workers",
        "1",
    ]
    proc = subprocess.Popen(
        cmd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(workdir / "litellm.log", "wb"),
        preexec_fn=_affinity(cpu),
    )
    auth = {"authorization": f"Bearer {MASTER_KEY}"}
    try:
        wait_http(f"http://127.0.0.1:{port}/health/liveliness", proc, 180, auth)
        probe = httpx.post(
            f"http://127.0.0.1:{port}/v1/chat/completions",
            headers=auth,
            timeout=30,
            json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}]},
        )
        probe.raise_for_status()
    except (RuntimeError, TimeoutError, httpx.HTTPError) as exc:
        tail = (workdir / "litellm.log").read_text(errors="replace")[-600:]
        print(f"SKIP litellm: it did not start or answer ({exc}); log tail:\n{tail}", flush=True)
        stop(proc)
        return None
    return Target("litellm", port, proc, headers=auth)


def rss_bytes(pid: int) -> int:
    """Resident memory of ``pid`` and its children."""
    try:
        import psutil
    except ImportError:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        return 0
    proc = psutil.Process(pid)
    return sum(p.memory_info().rss for p in [proc, *proc.children(recursive=True)])


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` (not its children)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------- workloads


async def sequential(
    target: Target, count: int, *, stream: bool
) -> tuple[list[float], list[float], int]:
    """``count`` requests one after another on one connection: (latencies, ttfbs, errors)."""
    conn = await RawConnection("127.0.0.1", target.port).open()
    data = target.request(0, stream=stream)
    latencies, ttfbs, errors = [], [], 0
    try:
        for _ in range(count):
            started = time.perf_counter()
            status, first, body = await conn.request(data)
            latencies.append(time.perf_counter() - started)
            target.served += 1
            ttfbs.append(first)
            if status != 200 or (stream and body.count(b"data:") < 33):
                errors += 1
    finally:
        conn.close()
    return latencies, ttfbs, errors


async def throughput(target: Target, concurrency: int, seconds: float) -> tuple[float, int]:
    """``concurrency`` connections sending back to back for ``seconds``: (rps, errors)."""
    conns = [RawConnection("127.0.0.1", target.port) for _ in range(concurrency)]
    await asyncio.gather(*(c.open() for c in conns))
    done = [0]
    errors = [0]
    deadline = time.perf_counter() + seconds

    async def worker(index: int, conn: RawConnection) -> None:
        data = target.request(index, stream=False)
        while time.perf_counter() < deadline:
            try:
                status, _, _ = await conn.request(data)
            except (ConnectionError, asyncio.IncompleteReadError, ValueError):
                errors[0] += 1
                continue
            if status == 200:
                done[0] += 1
            else:
                errors[0] += 1

    started = time.perf_counter()
    await asyncio.gather(*(worker(i, c) for i, c in enumerate(conns)))
    elapsed = time.perf_counter() - started
    target.served += done[0] + errors[0]
    for conn in conns:
        conn.close()
    return done[0] / elapsed, errors[0]


async def httpx_sequential(target: Target, count: int) -> list[float]:
    """The same sequential load through httpx, to show what the client itself costs."""
    data = json.loads(target.request(0, stream=False).split(b"\r\n\r\n", 1)[1])
    out = []
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{target.port}") as client:
        for _ in range(count):
            started = time.perf_counter()
            (
                await client.post(target.path(0), json=data, headers=target.headers)
            ).raise_for_status()
            out.append(time.perf_counter() - started)
    return out


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def run_round(targets: list[Target], profile: Profile, warm: bool) -> None:
    """One round: each workload, targets interleaved within it."""
    seq = profile.warmup if warm else profile.seq
    for target in targets:  # sequential non-streaming
        target.runs += 1
        cpu0 = cpu_seconds(target.proc.pid) if target.proc else 0.0
        lat, _, errors = await sequential(target, seq, stream=False)
        cpu = cpu_seconds(target.proc.pid) - cpu0 if target.proc else 0.0
        if not warm:
            target.add("p50_ms", pct(lat, 0.5) * 1e3)
            target.add("p99_ms", pct(lat, 0.99) * 1e3)
            target.add("errors", errors)
            target.cpu_per_req_us.append(cpu / seq * 1e6)
    for target in targets:  # sequential streaming
        target.runs += 1
        total, ttfb, errors = await sequential(
            target, profile.stream // (3 if warm else 1), stream=True
        )
        if not warm:
            target.add("ttfb_p50_ms", pct(ttfb, 0.5) * 1e3)
            target.add("stream_total_p50_ms", pct(total, 0.5) * 1e3)
            target.add("stream_errors", errors)
    for concurrency in CONCURRENCY:
        for target in targets:
            target.runs += 1
            rps, errors = await throughput(target, concurrency, profile.rps_s / (4 if warm else 1))
            if not warm:
                target.add(f"rps_c{concurrency}", rps)
                target.add(f"rps_c{concurrency}_errors", errors)


# ---------------------------------------------------------------- report


def summarise(targets: list[Target], client_cost: dict[str, float]) -> dict[str, Any]:
    med = {t.name: {k: statistics.median(v) for k, v in t.results.items()} for t in targets}
    direct = targets[0]
    summary: dict[str, Any] = {"targets": {}, "client": client_cost}
    for target in targets:
        m = med[target.name]
        row: dict[str, Any] = dict(m)
        if target is not direct:
            # (proxied - direct) per round, then the median over rounds.
            for key in ("p50_ms", "p99_ms", "ttfb_p50_ms"):
                diffs = [
                    a - b for a, b in zip(target.results[key], direct.results[key], strict=True)
                ]
                row[f"added_{key}"] = statistics.median(diffs)
            for c in CONCURRENCY:
                row[f"rps_c{c}_vs_direct"] = m[f"rps_c{c}"] / med["direct"][f"rps_c{c}"]
        if target.proc is not None:
            row["rss_mb"] = rss_bytes(target.proc.pid) / 2**20
            row["rss_start_mb"] = target.rss_start_mb
            row["requests_served"] = target.served
            row["cpu_us_per_request"] = statistics.median(target.cpu_per_req_us)
        row["rounds"] = {k: v for k, v in target.results.items()}
        summary["targets"][target.name] = row
    if "passthrough" in summary["targets"]:
        sp, floor = summary["targets"]["seedproxy"], summary["targets"]["passthrough"]
        summary["seedproxy_over_floor"] = {
            "added_p50_ms": sp["added_p50_ms"] - floor["added_p50_ms"],
            "cpu_per_request_x": sp["cpu_us_per_request"] / floor["cpu_us_per_request"],
        }
    if "litellm" in summary["targets"]:
        sp, ll = summary["targets"]["seedproxy"], summary["targets"]["litellm"]
        summary["seedproxy_vs_litellm"] = {
            "added_p50_x_less": ll["added_p50_ms"] / max(sp["added_p50_ms"], 1e-3),
            "added_p99_x_less": ll["added_p99_ms"] / max(sp["added_p99_ms"], 1e-3),
            "added_ttfb_x_less": ll["added_ttfb_p50_ms"] / max(sp["added_ttfb_p50_ms"], 1e-3),
            **{f"rps_c{c}_x_more": sp[f"rps_c{c}"] / ll[f"rps_c{c}"] for c in CONCURRENCY},
            "cpu_per_request_x_less": ll["cpu_us_per_request"] / sp["cpu_us_per_request"],
        }
    return summary


def table(summary: dict[str, Any]) -> str:
    names = list(summary["targets"])
    rows: list[tuple[str, str]] = [
        ("latency p50 (ms)", "p50_ms"),
        ("latency p99 (ms)", "p99_ms"),
        ("added p50 (ms)", "added_p50_ms"),
        ("added p99 (ms)", "added_p99_ms"),
        *[(f"req/s, concurrency {c}", f"rps_c{c}") for c in CONCURRENCY],
        *[(f"req/s c={c} vs direct", f"rps_c{c}_vs_direct") for c in CONCURRENCY],
        ("stream TTFB p50 (ms)", "ttfb_p50_ms"),
        ("added stream TTFB (ms)", "added_ttfb_p50_ms"),
        ("stream total p50 (ms)", "stream_total_p50_ms"),
        ("server CPU per request (us)", "cpu_us_per_request"),
        ("server RSS at start (MB)", "rss_start_mb"),
        ("server RSS after run (MB)", "rss_mb"),
        ("requests served in the run", "requests_served"),
    ]
    lines = ["| figure | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for label, key in rows:
        cells = []
        for name in names:
            value = summary["targets"][name].get(key)
            cells.append("" if value is None else _fmt(key, value))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    if "seedproxy_over_floor" in summary:
        floor = summary["seedproxy_over_floor"]
        lines.append("")
        lines.append(f"seedproxy over the bare pass-through floor: "
                     f"+{floor['added_p50_ms']:.3f} ms p50, "
                     f"{floor['cpu_per_request_x']:.2f}x its CPU per request")
    if "seedproxy_vs_litellm" in summary:
        lines.append("")
        lines.append("| seedproxy vs LiteLLM | ratio |")
        lines.append("|---|---|")
        for key, value in summary["seedproxy_vs_litellm"].items():
            lines.append(f"| {key} | {value:.1f}x |")
    return "\n".join(lines)


def _fmt(key: str, value: float) -> str:
    if key.startswith("rps") and "vs" not in key:
        return f"{value:,.0f}"
    if "vs_direct" in key:
        return f"{value:.0%}"
    if key in ("rss_mb", "rss_start_mb", "cpu_us_per_request", "requests_served"):
        return f"{value:,.0f}"
    return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"


# ---------------------------------------------------------------- main


@contextlib.contextmanager
def processes(targets: list[Target]) -> Iterator[None]:
    try:
        yield
    finally:
        for target in reversed(targets):
            stop(target.proc)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="fewer rounds and requests (about a minute)"
    )
    parser.add_argument("--out", default=str(BENCH / "results" / "overhead.json"))
    parser.add_argument("--no-litellm", action="store_true", help="skip LiteLLM")
    parser.add_argument(
        "--floor-client", default="lean",
        help="the bare pass-through proxy's HTTP client (bench/passthrough.py); "
        "seedproxy's own by default, 'none' skips it",
    )
    parser.add_argument(
        "--pin", action="store_true", help="pin the upstream to core 1 and proxies to core 0"
    )
    parser.add_argument(
        "--seedproxy-args",
        default="",
        help="extra `seedproxy serve` flags, e.g. '--workers 2 --store redis://...'",
    )
    args = parser.parse_args()
    profile = QUICK if args.quick else FULL
    with contextlib.suppress(ImportError):
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    workdir = Path(tempfile.mkdtemp(prefix="seedproxy-bench-"))
    targets: list[Target] = []
    with processes(targets):
        up_cpu, proxy_cpu = (1, 0) if args.pin else (None, None)
        targets.append(start_upstream(workdir, up_cpu))
        if args.floor_client != "none":
            targets.append(start_floor(targets[0], workdir, args.floor_client, proxy_cpu))
        targets.append(
            start_seedproxy(targets[0], workdir, shlex.split(args.seedproxy_args), proxy_cpu)
        )
        litellm = None if args.no_litellm else start_litellm(targets[0], workdir, proxy_cpu)
        if litellm is not None:
            targets.append(litellm)
        elif not args.no_litellm:
            print("continuing without litellm", flush=True)
        print(f"targets: {', '.join(t.name for t in targets)}; logs in {workdir}", flush=True)
        for target in targets:
            if target.proc is not None:
                target.rss_start_mb = rss_bytes(target.proc.pid) / 2**20
        asyncio.run(run_round(targets, profile, warm=True))
        started = time.monotonic()
        for index in range(profile.rounds):
            asyncio.run(run_round(targets, profile, warm=False))
            print(
                f"round {index + 1}/{profile.rounds} done ({time.monotonic() - started:.0f}s)",
                flush=True,
            )
        raw = asyncio.run(sequential(targets[0], profile.seq, stream=False))[0]
        via_httpx = asyncio.run(httpx_sequential(targets[0], profile.seq))
        client_cost = {"raw_p50_ms": pct(raw, 0.5) * 1e3, "httpx_p50_ms": pct(via_httpx, 0.5) * 1e3}
        summary = summarise(targets, client_cost)
    summary["machine"] = {
        "cpus": os.cpu_count(),
        "cpu": _cpu_model(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
    summary["command"] = " ".join(["python", "bench/overhead.py", *sys.argv[1:]])
    summary["profile"] = profile.__dict__
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(summary, indent=2))
    print()
    print(table(summary))
    print(
        f"\nclient cost (direct, sequential p50): raw sockets {client_cost['raw_p50_ms']:.3f} ms, "
        f"httpx {client_cost['httpx_p50_ms']:.3f} ms"
    )
    print(f"wrote {out}")
    return 0


def _cpu_model() -> str:
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as info:
        for line in info:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


if __name__ == "__main__":
    sys.exit(main())
