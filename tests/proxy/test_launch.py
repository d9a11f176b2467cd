"""``seedproxy sglang-command`` and ``seedproxy launch``, the latter with a fake
``sglang`` package on PYTHONPATH that records what each server was given."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest

from seedproxy.commands.cli import main
from seedproxy.commands.launch import parse_gpus, plan_servers
from seedproxy.errors import ConfigError
from tests.helpers.procs import gone, seedproxy_env, start_seedproxy
from tests.helpers.serving import Serving

ROOT = Path(__file__).resolve().parents[2]
FAKE_PKG = ROOT / "tests" / "helpers" / "fake_sglang_pkg"


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own errors
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_sglang_command_prints_the_deterministic_launch_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = [
        "sglang-command",
        "--model-path",
        "/models/Qwen 3",
        "--attention-backend",
        "fa3",
        "--tp",
        "2",
        "--port",
        "30001",
        "--",
        "--mem-fraction-static",
        "0.8",
    ]
    code, out, err = run_cli(argv, capsys)
    assert (code, err) == (0, "")
    assert out == (
        "python -m sglang.launch_server --model-path '/models/Qwen 3' "
        "--enable-deterministic-inference "
        "--attention-backend fa3 --tp 2 --port 30001 --mem-fraction-static 0.8\n"
    )


def test_sglang_command_without_a_backend_lets_sglang_pick(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run_cli(["sglang-command", "--model-path", "m"], capsys)
    assert (code, out, err) == (
        0,
        "python -m sglang.launch_server --model-path m --enable-deterministic-inference\n",
        "",
    )


def test_flashinfer_warns_that_the_radix_cache_goes(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(
        ["sglang-command", "--model-path", "m", "--attention-backend", "flashinfer"], capsys
    )
    assert code == 0
    assert out.endswith("--attention-backend flashinfer\n")
    assert err.count("\n") == 1 and "radix" in err and err.startswith("seedproxy: warning:")


@pytest.mark.parametrize("backend", ["torch_native", "fa2", "FA3"])
def test_an_attention_backend_outside_the_deterministic_set_is_refused(
    backend: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_cli(
        ["sglang-command", "--model-path", "m", "--attention-backend", backend], capsys
    )
    assert (code, out) == (2, "")
    assert err.count("\n") == 1
    assert repr(backend) in err
    assert "fa3, fa4, flashinfer, triton, ascend, intel_xpu" in err


def test_tp_groups_take_consecutive_gpus_and_ports() -> None:
    plan = plan_servers(
        "/m",
        parse_gpus("0,1,2,3"),
        tp=2,
        attention_backend="fa3",
        base_port=31000,
        extra=["--mem-fraction-static", "0.7"],
        python="/py",
    )
    assert [s.gpus for s in plan.servers] == [("0", "1"), ("2", "3")]
    assert plan.urls == ["http://127.0.0.1:31000", "http://127.0.0.1:31001"]
    assert list(plan.servers[1].argv) == [
        "/py",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "/m",
        "--enable-deterministic-inference",
        "--attention-backend",
        "fa3",
        "--tp",
        "2",
        "--host",
        "127.0.0.1",
        "--port",
        "31001",
        "--mem-fraction-static",
        "0.7",
    ]
    assert plan.servers[1].env({"PATH": "/bin"}) == {"PATH": "/bin", "CUDA_VISIBLE_DEVICES": "2,3"}


@pytest.mark.parametrize(
    ("gpus", "tp", "message"),
    [
        ("0,1,2", 2, "3 GPUs, which is not a multiple of --tp 2"),
        ("0,,1", 1, "comma-separated"),
        ("0,1,0", 1, "GPU 0 more than once"),
        ("0,1", 0, "--tp must be at least 1"),
    ],
)
def test_bad_gpu_layouts_are_refused(gpus: str, tp: int, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        plan_servers("/m", parse_gpus(gpus), tp=tp)


def test_launch_refuses_a_bad_layout_in_one_line_before_starting_anything(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = [
        "launch",
        "--model-path",
        "m",
        "--gpus",
        "0,1,2",
        "--tp",
        "2",
        "--python",
        "/nonexistent",
    ]
    code, out, err = run_cli(argv, capsys)
    assert code == 2
    assert err == "seedproxy: error: --gpus lists 3 GPUs, which is not a multiple of --tp 2\n"


def test_launch_refuses_in_one_line_when_sglang_is_missing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path,
) -> None:
    """A Python without sglang (this one, whose path has no fake package), and one that
    does not run: a one-line error each, before any server starts."""
    assert subprocess.run([sys.executable, "-c", "import sglang"],
                          capture_output=True).returncode != 0
    argv = ["launch", "--model-path", "m", "--gpus", "0", "--base-port", "0"]
    code, out, err = run_cli([*argv, "--python", sys.executable], capsys)
    assert code == 2
    assert err == (f"seedproxy: error: sglang is not installed for {sys.executable}: on a "
                   "GPU host, pip install -e '.[sglang]' (or pass --python with a "
                   "Python that has sglang)\n")
    code, out, err = run_cli([*argv, "--python", str(tmp_path / "no-python")], capsys)
    assert code == 2 and err.startswith("seedproxy: error: cannot run --python ")
    assert err.count("\n") == 1


def test_the_sglang_extra_pins_the_version_the_test_server_follows() -> None:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["optional-dependencies"]["sglang"] == ["sglang==0.5.23"]
    from tests.helpers.fake_control import SERVER_INFO

    assert SERVER_INFO["version"] == "0.5.23"


def launcher_env(records: Path, **extra: str) -> dict[str, str]:
    env = seedproxy_env(FAKE_SGLANG_RECORD_DIR=str(records), **extra)
    env["PYTHONPATH"] = os.pathsep.join([str(FAKE_PKG), str(ROOT), env["PYTHONPATH"]])
    return env


def read_records(records: Path, count: int, timeout_s: float = 30) -> list[dict[str, object]]:
    deadline = time.monotonic() + timeout_s
    while len(list(records.glob("*.json"))) < count:
        assert time.monotonic() < deadline, "the fake SGLang servers did not all start"
        time.sleep(0.05)
    found = [json.loads(p.read_text()) for p in sorted(records.glob("*.json"))]
    return sorted(found, key=lambda r: str(r["cuda_visible_devices"]))


def kill_leftovers(proc: subprocess.Popen[bytes], records: Path) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    for path in records.glob("*.json"):
        pid = int(json.loads(path.read_text())["pid"])
        if not gone(pid):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("stop_with", [signal.SIGINT, signal.SIGTERM])
def test_launch_starts_one_server_per_tp_group_and_stops_them_all(
    tmp_path: Path, stop_with: signal.Signals
) -> None:
    served = Serving(
        "--model-path",
        "/models/tiny",
        "--gpus",
        "0,1,2,3",
        "--tp",
        "2",
        "--attention-backend",
        "fa3",
        "--base-port",
        "0",
        "--",
        "--mem-fraction-static",
        "0.7",
        command="launch", env=launcher_env(tmp_path), log=tmp_path / "launch.log",
    )
    proc = served.proc
    try:
        proxy = served.wait().url
        first, second = read_records(tmp_path, 2)
        assert [first["cuda_visible_devices"], second["cuda_visible_devices"]] == ["0,1", "2,3"]
        ports = []
        for record in (first, second):
            argv = record["argv"]
            assert isinstance(argv, list)
            ports.append(int(argv[-3]))
            assert argv == [
                "--model-path",
                "/models/tiny",
                "--enable-deterministic-inference",
                "--attention-backend",
                "fa3",
                "--tp",
                "2",
                "--host",
                "127.0.0.1",
                "--port",
                str(ports[-1]),
                "--mem-fraction-static",
                "0.7",
            ]
            assert record["pgid"] == record["pid"]  # its own process group
        c = openai.OpenAI(base_url=f"{proxy}/sessions/l-1/v1", api_key="x", max_retries=0)
        raw = c.chat.completions.with_raw_response.create(
            model="m", messages=[{"role": "user", "content": "hi"}]
        )
        assert raw.headers["x-seedproxy-upstream"] in {f"http://127.0.0.1:{p}" for p in ports}

        proc.send_signal(stop_with)
        assert proc.wait(timeout=60) in (0, 130)
        assert gone(int(first["pid"])) and gone(int(second["pid"]))  # type: ignore[call-overload]
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"http://127.0.0.1:{ports[0]}/health")
    finally:
        kill_leftovers(proc, tmp_path)


def test_a_server_that_dies_while_loading_fails_the_launch_and_stops_the_rest(
    tmp_path: Path,
) -> None:
    proc = start_seedproxy(
        "launch",
        "--model-path",
        "/models/tiny",
        "--gpus",
        "0,1",
        "--base-port",
        "0",
        "--port",
        "0",
        # GPU 1's server dies once both servers have recorded themselves (by design,
        # not by luck: the launcher stops GPU 0's server as soon as GPU 1's dies).
        env=launcher_env(tmp_path, FAKE_SGLANG_FAIL_ON_GPUS="1", FAKE_SGLANG_FAIL_AFTER="2"),
        stderr=subprocess.PIPE,
    )
    try:
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 2
        last = err.decode().strip().splitlines()[-1]
        assert last.startswith("seedproxy: error: SGLang server on GPUs 1 exited with code 3")
        for record in read_records(tmp_path, 2):
            assert gone(int(record["pid"]))  # type: ignore[call-overload]
    finally:
        kill_leftovers(proc, tmp_path)


def test_servers_die_with_a_launcher_killed_outright(tmp_path: Path) -> None:
    served = Serving("--model-path", "/models/tiny", "--gpus", "0", "--base-port", "0",
                     command="launch", env=launcher_env(tmp_path), log=tmp_path / "launch.log")
    proc = served.proc
    try:
        served.wait()
        (record,) = read_records(tmp_path, 1)
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 30
        while not gone(int(record["pid"])):  # type: ignore[call-overload]
            assert time.monotonic() < deadline, "the server outlived its launcher"
            time.sleep(0.05)
    finally:
        kill_leftovers(proc, tmp_path)
