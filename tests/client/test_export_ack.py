"""seedproxy.client and ``seedproxy export`` deliver at least once: they acknowledge a
batch only after it is written and fsynced, and their export's HTTP timeout follows
the server's wait (``timeout_s``), even past the client's default 120 s."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

import seedproxy.client._client as client_module
from seedproxy.client import EXPORT_MARGIN_S, ExportBatch, SeedProxyClient
from seedproxy.commands.export import HTTP_MARGIN_S, http_timeout_s
from tests.helpers.procs import seedproxy_env

MSG = [{"role": "user", "content": "hello"}]


def ended(http: httpx.Client, identity: str, size: int) -> list[str]:
    made = http.post("/sessions", json={"identity": identity, "group_size": size}).json()
    ids = [s["session_id"] for s in made["sessions"]]
    for sid in ids:
        assert http.post(f"/sessions/{sid}/v1/chat/completions",
                         json={"messages": MSG}).status_code == 200
        http.post(f"/sessions/{sid}/end")
    return ids


def exported(http: httpx.Client, ids: list[str]) -> list[bool]:
    return [http.get(f"/sessions/{s}").json()["exported"] for s in ids]


class Recorder:
    """What happens, in order: each admin request (and its read timeout), each fsync."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    async def on_request(self, request: httpx.Request) -> None:
        self.events.append((f"{request.method} {request.url.path}",
                            request.extensions["timeout"]["read"]))


async def test_group_export_writes_fsyncs_then_acknowledges(
    proxy: str, http: httpx.Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorder = Recorder()
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        recorder.events.append(("fsync", None))
        real_fsync(fd)

    monkeypatch.setattr(client_module.os, "fsync", fsync)
    out = tmp_path / "rollouts.jsonl"
    async with httpx.AsyncClient(base_url=proxy, timeout=120,
                                 event_hooks={"request": [recorder.on_request]}) as raw:
        proxy_client = SeedProxyClient(proxy, http=raw)
        group = await proxy_client.create_group("durable", k=2)
        ids = [s.session_id for s in group.samples]
        for sid in ids:
            http.post(f"/sessions/{sid}/end")
        batch = await group.export(out=out, timeout_s=5)
    assert isinstance(batch, ExportBatch) and batch.batch_id
    assert [t.session_id for t in batch] == ids
    lines = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert [line["session_id"] for line in lines] == ids
    names = [name for name, _ in recorder.events]
    assert names.index("POST /trajectories/export") < names.index("fsync") \
        < names.index("POST /trajectories/ack")
    assert exported(http, ids) == [True, True]


async def test_a_failed_write_acknowledges_nothing(
    proxy: str, http: httpx.Client, tmp_path: Path
) -> None:
    ids = ended(http, "unwritten", 1)
    async with SeedProxyClient(proxy) as proxy_client:
        with pytest.raises(OSError):
            await proxy_client.export(group_id="unwritten", out=tmp_path / "no" / "such.jsonl",
                                      visibility_timeout_s=0.2)
        assert exported(http, ids) == [False]
        # the lease runs out and the batch comes again; this time kept for an explicit ack
        # (the server waits for it: count 1 within 30 s)
        again = await proxy_client.export(group_id="unwritten", count=1, timeout_s=30, ack=False)
        assert [t.session_id for t in again] == ids and exported(http, ids) == [False]
        assert await proxy_client.export(group_id="unwritten") == []  # still leased
        await proxy_client.ack(again.batch_id)
        await proxy_client.ack(again.batch_id)  # idempotent
    assert exported(http, ids) == [True]


async def test_the_export_http_timeout_follows_timeout_s(proxy: str, http: httpx.Client) -> None:
    ended(http, "long-wait", 1)
    recorder = Recorder()
    async with httpx.AsyncClient(base_url=proxy, timeout=120,
                                 event_hooks={"request": [recorder.on_request]}) as raw:
        proxy_client = SeedProxyClient(proxy, http=raw)
        # count 1 is already there: the server answers at once, whatever the wait allowed
        got = await proxy_client.export(group_id="long-wait", count=1, timeout_s=300)
        assert len(got) == 1
        await proxy_client.export(group_id="long-wait", timeout_s=0)
    timeouts = [t for name, t in recorder.events if name == "POST /trajectories/export"]
    assert timeouts == [300 + EXPORT_MARGIN_S, 120]  # past 120 s, and never below it
    default = SeedProxyClient(proxy)
    assert default.export_timeout_s(3000) == 3000 + EXPORT_MARGIN_S
    assert default.export_timeout_s(1) == 120
    await default.aclose()
    assert http_timeout_s(300) == 300 + HTTP_MARGIN_S > 120


def _cli(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "seedproxy", "export", *args],
                          env=seedproxy_env(), capture_output=True, timeout=120)


def test_the_cli_acknowledges_only_what_it_wrote(
    proxy: str, http: httpx.Client, tmp_path: Path
) -> None:
    ids = ended(http, "cli-ack", 2)
    failed = _cli("--url", proxy, "--group", "cli-ack", "--visibility-timeout", "0.2",
                  "--timeout", "200", "--out", str(tmp_path / "no" / "such.jsonl"))
    assert failed.returncode == 2 and b"cannot write" in failed.stderr
    assert exported(http, ids) == [False, False]
    out = tmp_path / "out.jsonl"
    # the server waits until the unwritten batch's lease runs out; then it is written, acked
    done = _cli("--url", proxy, "--group", "cli-ack", "--count", "2", "--timeout", "30",
                "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert [orjson.loads(line)["session_id"] for line in out.read_bytes().splitlines()] == ids
    assert exported(http, ids) == [True, True]
    bad = _cli("--url", proxy, "--visibility-timeout", "0", "--out", str(out))
    assert bad.returncode == 2 and b"--visibility-timeout" in bad.stderr


def test_an_empty_export_says_what_is_still_open(
    proxy: str, http: httpx.Client, tmp_path: Path
) -> None:
    """Only ended sessions are exported: an export that finds none says so, and counts
    the sessions still open, instead of exiting 0 with no word."""
    for name in ("open-a", "open-b", "open-c"):
        assert http.post("/sessions", json={"session_id": name}).status_code == 201
    out = tmp_path / "empty.jsonl"
    done = _cli("--url", proxy, "--timeout", "0.1", "--out", str(out))
    assert done.returncode == 0 and out.read_bytes() == b""
    assert b"no ended session to export; 3 sessions still open" in done.stderr, done.stderr
