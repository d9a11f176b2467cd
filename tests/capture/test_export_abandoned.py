"""Issue 34, item 1, through a real proxy (uvicorn, the fake SGLang upstream) and the
real ``seedproxy export``: the README's first curl leaves session ``a`` open; an export
names it as what it waits behind, and once ``a`` has been idle past
``--abandon-after-s`` it is ended as abandoned and exported in its creation place. The
proxy's clock is injected (``create_app(clock=...)``): nothing sleeps."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson

from seedproxy.client import SeedProxyClient
from tests.conftest import Fake
from tests.helpers.procs import seedproxy_env

ABANDON_S = 1800.0
PROMPT = {"model": "default", "prompt": "1+1=", "max_tokens": 2}


class Clock:
    """Wall-clock seconds, ``ahead`` of the real ones."""

    def __init__(self) -> None:
        self.ahead = 0.0

    def __call__(self) -> float:
        return time.time() + self.ahead


def started(fake: Fake, start_proxy: Callable[..., str], clock: Clock) -> str:
    return start_proxy([fake.url], abandon_after_s=ABANDON_S, _app={"clock": clock})


def export_cli(url: str, out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "seedproxy", "export", "--url", url,
                           "--out", str(out), *args],
                          env=seedproxy_env(), capture_output=True, text=True, timeout=120)


def lines(out: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in out.read_bytes().splitlines()]


def test_the_readme_curl_session_is_named_then_exported_abandoned(
    fake: Fake, start_proxy: Callable[..., str], tmp_path: Path
) -> None:
    clock = Clock()
    url = started(fake, start_proxy, clock)
    with httpx.Client(base_url=url, timeout=30) as http:
        for session in ("a", "b"):
            assert http.post(f"/sessions/{session}/v1/completions", json=PROMPT).is_success
        assert http.post("/sessions/b/end").is_success
        out = tmp_path / "x.jsonl"
        stalled = export_cli(url, out)
        assert stalled.returncode == 0 and lines(out) == []
        said = stalled.stderr.strip()
        assert "\n" not in said, said  # one line
        assert re.search(r"no ended session to export; 1 session still open; in creation "
                         r"order it waits behind open session a \(idle \d+ s, ended as "
                         r"abandoned in \d+ s\)", said), said
        answer = http.post("/trajectories/export", json={}).json()
        assert answer["trajectories"] == [] and answer["skipped"] == []
        (waiting,) = answer["waiting_on"]
        assert waiting["session_id"] == "a"
        assert abs(waiting["idle_s"] + waiting["abandoned_in_s"] - ABANDON_S) <= 0.2
        clock.ahead = ABANDON_S  # a (and b) idle for the abandon time
        done = export_cli(url, out)
        assert done.returncode == 0, done.stderr
        assert done.stderr.strip() == f"seedproxy: export: wrote 2 trajectories to {out}"
        exported = lines(out)
        assert [(t["session_id"], t["end_status"]) for t in exported] == [
            ("a", "abandoned"), ("b", "ended")]
        assert [len(t["interactions"]) for t in exported] == [1, 1]
        a = http.get("/sessions/a").json()
        assert (a["ended"], a["end_status"], a["exported"]) == (True, "abandoned", True)


def test_skip_abandoned_leaves_them_out_and_takes_them_out(
    fake: Fake, start_proxy: Callable[..., str], tmp_path: Path
) -> None:
    clock = Clock()
    url = started(fake, start_proxy, clock)
    with httpx.Client(base_url=url, timeout=30) as http:
        for session in ("c", "d", "e"):
            assert http.post(f"/sessions/{session}/v1/completions", json=PROMPT).is_success
        for session in ("d", "e"):
            assert http.post(f"/sessions/{session}/end").is_success
        clock.ahead = ABANDON_S
        out = tmp_path / "x.jsonl"
        done = export_cli(url, out, "--skip-abandoned", "--count", "2")
        assert done.returncode == 0, done.stderr
        assert [t["session_id"] for t in lines(out)] == ["d", "e"]
        assert "skipped 1 abandoned session" in done.stderr
        assert http.get("/sessions/c").json()["exported"] is True  # acked with its batch
        assert http.post("/trajectories/export", json={}).json()["trajectories"] == []


async def test_the_client_reads_the_end_status_and_can_skip_abandoned(
    fake: Fake, start_proxy: Callable[..., str]
) -> None:
    clock = Clock()
    url = started(fake, start_proxy, clock)
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        for session in ("f", "g", "h"):
            assert (await http.post(f"/sessions/{session}/v1/completions",
                                    json=PROMPT)).is_success
        for session in ("g", "h"):
            assert (await http.post(f"/sessions/{session}/end")).is_success
    async with SeedProxyClient(url) as proxy:
        assert await proxy.export() == []  # f is open and not idle yet
        clock.ahead = ABANDON_S
        kept = await proxy.export(count=1, skip_abandoned=True)  # f skipped, g counted
        assert [(t.session_id, t.end_status) for t in kept] == [("g", "ended")]
        rest = await proxy.export()
        assert [(t.session_id, t.end_status) for t in rest] == [("h", "ended")]


async def test_a_group_export_can_skip_abandoned(
    fake: Fake, start_proxy: Callable[..., str]
) -> None:
    clock = Clock()
    url = started(fake, start_proxy, clock)
    async with SeedProxyClient(url) as proxy:
        group = await proxy.create_group("skipper", k=3)
        async with httpx.AsyncClient(timeout=30) as http:
            for sample in group.samples:
                sent = await http.post(f"{sample.base_url}/completions", json=PROMPT,
                                       headers={"authorization": f"Bearer {sample.api_key}"})
                assert sent.is_success
        for sample in group.samples[1:]:
            await proxy.end(sample.session_id)
        clock.ahead = ABANDON_S  # the first sample is idle for the abandon time
        kept = await group.export(skip_abandoned=True, timeout_s=0.0)
        assert [(t.session_id, t.end_status) for t in kept] == [
            (s.session_id, "ended") for s in group.samples[1:]]
