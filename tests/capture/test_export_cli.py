"""Issue 34, item 12: ``seedproxy export`` checks its output before it leases anything,
writes devices (``/dev/null``) without an fsync they refuse, and says what it did in
one line (a progress bar only on a terminal, in trajectories)."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
from pathlib import Path

import httpx
import orjson

from tests.helpers.procs import seedproxy_env

MSG = [{"role": "user", "content": "hello"}]


def ended(http: httpx.Client, *sessions: str) -> None:
    for session in sessions:
        assert http.post(f"/sessions/{session}/v1/chat/completions",
                         json={"messages": MSG}).is_success
        assert http.post(f"/sessions/{session}/end").is_success


def export_cli(url: str, out: str, **run: object) -> subprocess.CompletedProcess[bytes]:
    argv = [sys.executable, "-m", "seedproxy", "export", "--url", url, "--out", out]
    return subprocess.run(argv, env=seedproxy_env(), timeout=120, **run)  # type: ignore[call-overload,no-any-return]


def test_dev_null_is_written_and_acknowledged(proxy: str, http: httpx.Client) -> None:
    ended(http, "n1", "n2")
    done = export_cli(proxy, os.devnull, capture_output=True)
    assert done.returncode == 0, done.stderr
    said = done.stderr.decode().strip()
    assert said == f"seedproxy: export: wrote 2 trajectories to {os.devnull}"
    assert [http.get(f"/sessions/{s}").json()["exported"] for s in ("n1", "n2")] == [True, True]


def test_an_output_that_cannot_be_written_leases_nothing(
    proxy: str, http: httpx.Client, tmp_path: Path
) -> None:
    ended(http, "w1")
    for out in (tmp_path / "no" / "such.jsonl", tmp_path):  # no folder; a folder
        failed = export_cli(proxy, str(out), capture_output=True)
        assert failed.returncode == 2 and b"cannot write" in failed.stderr, failed.stderr
    assert not (tmp_path / "no").exists()
    # nothing was leased: the session is there for the next export at once, not in 300 s
    taken = http.post("/trajectories/export", json={}).json()["trajectories"]
    assert [t["session_id"] for t in taken] == ["w1"]


def test_a_failed_export_keeps_an_existing_file_and_creates_none(
    tmp_path: Path, proxy: str
) -> None:
    kept = tmp_path / "kept.jsonl"
    kept.write_bytes(b"old\n")
    for out in (kept, tmp_path / "new.jsonl"):
        failed = export_cli(proxy + "/nowhere", str(out), capture_output=True)  # a 404
        assert failed.returncode == 2 and b"answered 404" in failed.stderr, failed.stderr
    assert kept.read_bytes() == b"old\n" and not (tmp_path / "new.jsonl").exists()


def test_one_line_for_nothing_and_no_bar_off_a_terminal(
    proxy: str, http: httpx.Client, tmp_path: Path
) -> None:
    out = tmp_path / "x.jsonl"
    empty = export_cli(proxy, str(out), capture_output=True)
    assert empty.returncode == 0
    assert empty.stderr.decode().splitlines() == [
        f"seedproxy: export: no ended session to export (only ended sessions are exported: "
        f"POST /sessions/{{id}}/end); wrote 0 to {out}"]
    ended(http, "one")
    single = export_cli(proxy, str(out), capture_output=True)
    assert single.stderr.decode().splitlines() == [
        f"seedproxy: export: wrote 1 trajectory to {out}"]
    assert [orjson.loads(line)["session_id"] for line in out.read_bytes().splitlines()] == [
        "one"]


def test_on_a_terminal_the_bar_counts_trajectories(
    proxy: str, http: httpx.Client, tmp_path: Path
) -> None:
    ended(http, "t1", "t2")
    main, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))  # 120 columns
    try:
        done = export_cli(proxy, str(tmp_path / "x.jsonl"), stdout=subprocess.DEVNULL,
                          stderr=child)
    finally:
        os.close(child)
    shown = b""
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # EIO: the terminal's other side is closed and drained
            break
        if not chunk:
            break
        shown += chunk
    os.close(main)
    assert done.returncode == 0
    text = shown.decode()
    assert "export: 100%" in text and "2/2" in text and " trajectories/s]" in text, text
    assert "0trajectory" not in text and "trajectory/s" not in text
