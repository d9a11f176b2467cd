"""Rewards, trajectories and batch exports: order (deterministic and not), count,
timeout, remove, ``?wait=true``, the concat style, and ``seedproxy export``."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson

from seedproxy.client import Trajectory
from tests.conftest import Fake
from tests.helpers.procs import seedproxy_env

MSG = [{"role": "user", "content": "hello"}]


def group(http: httpx.Client, identity: str, size: int) -> list[str]:
    made = http.post("/sessions", json={"identity": identity, "group_size": size}).json()
    return [s["session_id"] for s in made["sessions"]]


def turn(http: httpx.Client, session: str) -> None:
    assert (
        http.post(f"/sessions/{session}/v1/chat/completions", json={"messages": MSG}).status_code
        == 200
    )


def export(http: httpx.Client, **body: Any) -> list[str]:
    r = http.post("/trajectories/export", json=body)
    assert r.status_code == 200, r.text
    return [t["session_id"] for t in r.json()["trajectories"]]


def test_rewards_on_an_interaction_and_on_the_last(http: httpx.Client) -> None:
    for _ in range(3):
        turn(http, "rw")
    assert http.post(
        "/sessions/rw/reward", json={"reward": 0.5, "interaction_id": "i0"}
    ).json() == {"session_id": "rw", "interaction_id": "i0", "reward": 0.5}
    assert http.post("/sessions/rw/reward", json={"reward": 1.0}).json()["interaction_id"] == "i2"
    assert (
        http.post("/sessions/rw/reward", json={"reward": 1, "interaction_id": "i9"}).status_code
        == 404
    )
    assert http.post("/sessions/rw/reward", json={"reward": "x"}).status_code == 400
    trajectory = http.get("/sessions/rw/trajectory").json()
    assert [i["reward"] for i in trajectory["interactions"]] == [0.5, None, 1.0]
    assert [i["request_index"] for i in trajectory["interactions"]] == [0, 1, 2]
    assert trajectory["reward"] == 1.0


def test_deterministic_export_keeps_creation_order_while_sessions_end_in_reverse(
    http: httpx.Client,
) -> None:
    ids = group(http, "det", 4)
    for sid in ids:
        turn(http, sid)
    for sid in reversed(ids[2:]):
        http.post(f"/sessions/{sid}/end")
    # sessions 2 and 3 ended first, but 0 and 1 come first in creation order
    assert export(http, group_id="det", count=2, timeout_s=0.2) == []
    taken: list[list[str]] = []
    waiter = threading.Thread(
        target=lambda: taken.append(
            export(
                httpx.Client(base_url=str(http.base_url), timeout=30),
                group_id="det",
                count=2,
                timeout_s=20,
            )
        )
    )
    waiter.start()
    http.post(f"/sessions/{ids[1]}/end")
    http.post(f"/sessions/{ids[0]}/end")
    waiter.join()
    assert taken == [ids[:2]]
    assert export(http, group_id="det", count=2) == ids[2:]
    assert export(http, group_id="det") == []


def test_export_without_count_takes_only_the_ended_prefix_in_deterministic_mode(
    http: httpx.Client,
) -> None:
    ids = group(http, "pre", 3)
    http.post(f"/sessions/{ids[0]}/end")
    http.post(f"/sessions/{ids[2]}/end")
    assert export(http, group_id="pre") == ids[:1]
    http.post(f"/sessions/{ids[1]}/end")
    assert export(http, group_id="pre") == ids[1:]


def test_non_deterministic_export_comes_in_end_order(
    fake: Fake, start_proxy: Callable[..., str]
) -> None:
    with httpx.Client(base_url=start_proxy([fake.url], deterministic=False), timeout=30) as http:
        ids = group(http, "nd", 4)
        for sid in [ids[3], ids[1], ids[2], ids[0]]:
            http.post(f"/sessions/{sid}/end")
        assert export(http, count=2) == [ids[3], ids[1]]
        assert export(http, count=3, timeout_s=0.2) == [ids[2], ids[0]]  # timeout: what is ready


def test_remove_forgets_the_exported_sessions_and_keeping_them_hides_them(
    http: httpx.Client,
) -> None:
    ids = group(http, "rm", 2)
    for sid in ids:
        turn(http, sid)
        http.post(f"/sessions/{sid}/end")
    r = http.post("/trajectories/export", json={"session_ids": [ids[0]], "remove": True})
    assert len(r.json()["trajectories"][0]["interactions"]) == 1
    assert http.get(f"/sessions/{ids[0]}").status_code == 200  # deleted on ack, not before
    acked = http.post("/trajectories/ack", json={"batch_id": r.json()["batch_id"]})
    assert acked.status_code == 200
    assert http.get(f"/sessions/{ids[0]}").status_code == 404
    assert export(http, group_id="rm") == [ids[1]]
    assert http.get(f"/sessions/{ids[1]}").status_code == 200
    assert export(http, group_id="rm") == []


def test_remove_of_an_open_named_session_is_a_400_and_its_next_turn_goes_on(
    http: httpx.Client,
) -> None:
    """Issue 34, item 7: deleting an open session would let its agent's next turn start
    it again at index 0, splitting the rollout in two records."""
    turn(http, "rm-open")
    refused = http.post("/trajectories/export", json={"session_ids": ["rm-open", "rm-open"],
                                                       "remove": True})
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert error["param"] == "remove" and "rm-open" in error["message"]
    turn(http, "rm-open")
    assert http.get("/sessions/rm-open").json()["next_index"] == 2
    http.post("/sessions/rm-open/end")
    taken = http.post("/trajectories/export", json={"session_ids": ["rm-open", "rm-open"],
                                                     "remove": True}).json()
    assert [len(t["interactions"]) for t in taken["trajectories"]] == [2]  # once, whole


def test_a_session_taken_with_wait_is_not_exported_again(http: httpx.Client) -> None:
    ids = group(http, "wt", 2)
    for sid in ids:
        http.post(f"/sessions/{sid}/end")
    assert http.get(f"/sessions/{ids[0]}/trajectory", params={"wait": "true"}).status_code == 200
    assert export(http, group_id="wt", count=1) == [ids[1]]


def test_wait_runs_out_with_a_504_and_takes_nothing(http: httpx.Client) -> None:
    (sid,) = group(http, "wto", 1)
    late = http.get(f"/sessions/{sid}/trajectory", params={"wait": "true", "timeout_s": 0.2})
    assert late.status_code == 504 and late.json()["error"]["type"] == "timeout_error"
    for bad in ("0", "-1", "3601"):
        answer = http.get(f"/sessions/{sid}/trajectory", params={"wait": "true", "timeout_s": bad})
        assert answer.status_code == 400 and answer.json()["error"]["param"] == "timeout_s"
    http.post(f"/sessions/{sid}/end")
    assert export(http, group_id="wto") == [sid]  # the timed-out wait took nothing


def test_concat_joins_turns_that_extend_each_other(http: httpx.Client) -> None:
    prompt = [1, 2, 3]
    completions = []
    for _ in range(3):
        r = http.post(
            "/sessions/cat/v1/completions", json={"prompt": prompt, "max_tokens": 4}
        ).json()
        ids = http.get("/sessions/cat/trajectory").json()["interactions"][-1][
            "completion_token_ids"
        ]
        assert r["choices"][0]["text"]
        completions.append(ids)
        prompt = prompt + ids + [9, 9]
    http.post("/sessions/cat/end")
    record = http.post(
        "/trajectories/export", json={"session_ids": ["cat"], "style": "concat"}
    ).json()
    joined = record["trajectories"][0]
    assert joined["concat_error"] is None
    c0, c1, c2 = completions
    assert joined["token_ids"] == [1, 2, 3, *c0, 9, 9, *c1, 9, 9, *c2]
    assert joined["loss_mask"] == [0] * 3 + [1] * 4 + [0, 0] + [1] * 4 + [0, 0] + [1] * 4
    individual = http.get("/sessions/cat/trajectory").json()["interactions"]
    expected_lp = (
        [0.0] * 3
        + individual[0]["logprobs"]
        + [0.0] * 2
        + individual[1]["logprobs"]
        + [0.0] * 2
        + individual[2]["logprobs"]
    )
    assert joined["logprobs"] == expected_lp
    assert joined["interaction_ids"] == ["i0", "i1", "i2"]
    assert "interactions" not in joined


def test_concat_says_which_weight_version_sampled_each_token(http: httpx.Client) -> None:
    prompt = [1, 2, 3]
    for version in ("v1", "v2"):
        assert http.post("/fleet/weight_version", json={"version": version}).status_code == 200
        answer = http.post("/sessions/wv/generate", json={
            "input_ids": prompt, "sampling_params": {"max_new_tokens": 4}}).json()
        prompt = prompt + answer["output_ids"] + [9, 9]
    joined = http.get("/sessions/wv/trajectory", params={"style": "concat"}).json()
    assert joined["concat_error"] is None and len(joined["token_ids"]) == 3 + 4 + 2 + 4
    assert joined["weight_versions"] == [{"version": "v1", "start": 3, "end": 7},
                                         {"version": "v2", "start": 9, "end": 13}]
    versions = Trajectory.from_json(joined).token_versions()
    assert versions == [None] * 3 + ["v1"] * 4 + [None] * 2 + ["v2"] * 4


def test_concat_reports_template_drift_at_its_turn(proxy: str, http: httpx.Client) -> None:
    c = openai.OpenAI(base_url=f"{proxy}/sessions/drift/v1", api_key="x", max_retries=0)
    messages: list[Any] = [{"role": "user", "content": "hi"}]
    reply = c.chat.completions.create(model="m", messages=messages).choices[0].message.content
    messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": "more"}]
    c.chat.completions.create(model="m", messages=messages)
    joined = http.get("/sessions/drift/trajectory", params={"style": "concat"}).json()
    # the fake re-tokenises the reply's text, not the sampled ids: the prompt drifts
    first_prompt = len("<user>hi<assistant>")
    assert joined["concat_error"] == {
        "turn": 1,
        "interaction_id": "i1",
        "request_index": 1,
        "reason": "prompt does not extend the previous turn",
        "position": first_prompt,
    }
    assert joined["token_ids"] is None and joined["loss_mask"] is None
    assert len(joined["interactions"]) == 2


def test_export_cli_writes_jsonl_as_a_real_subprocess(
    proxy: str, http: httpx.Client, tmp_path: Path
) -> None:
    ids = group(http, "cli", 2)
    for sid in ids:
        turn(http, sid)
        http.post(f"/sessions/{sid}/end")
    out = tmp_path / "out.jsonl"
    done = subprocess.run(
        [
            *_cli(),
            "export",
            "--url",
            proxy,
            "--group",
            "cli",
            "--count",
            "2",
            "--style",
            "concat",
            "--timeout",
            "5",
            "--out",
            str(out),
        ],
        env=seedproxy_env(),
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    lines = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert [line["session_id"] for line in lines] == ids
    assert all(line["style"] == "concat" and line["token_ids"] for line in lines)
    bad = subprocess.run(
        [*_cli(), "export", "--url", proxy, "--count", "0", "--out", str(out)],
        env=seedproxy_env(),
        capture_output=True,
        timeout=60,
    )
    assert bad.returncode == 2
    assert bad.stderr.decode().strip().count("\n") == 0 and "--count" in bad.stderr.decode()


def test_export_cli_short_of_count_writes_what_came_and_says_so(
    proxy: str, http: httpx.Client, tmp_path: Path
) -> None:
    out = tmp_path / "out.jsonl"
    argv = [*_cli(), "export", "--url", proxy, "--group", "short", "--count", "2",
            "--timeout", "0.2", "--out", str(out)]
    (sid,) = group(http, "short", 1)
    nothing = subprocess.run(argv, env=seedproxy_env(), capture_output=True, timeout=60)
    assert nothing.returncode == 1
    assert "only 0 of 2 sessions had ended" in nothing.stderr.decode()
    assert out.read_bytes() == b""
    http.post(f"/sessions/{sid}/end")
    one = subprocess.run(argv, env=seedproxy_env(), capture_output=True, timeout=60)
    assert one.returncode == 1 and "only 1 of 2" in one.stderr.decode()
    # what came is written (it is taken out of later exports, so it must not be lost)
    assert [orjson.loads(line)["session_id"] for line in out.read_bytes().splitlines()] == [sid]


def _cli() -> list[str]:
    return [sys.executable, "-m", "seedproxy"]


def test_an_unknown_style_is_a_400(http: httpx.Client) -> None:
    turn(http, "st")
    assert http.post("/trajectories/export", json={"style": "bogus"}).status_code == 400
    assert http.get("/sessions/st/trajectory", params={"style": "bogus"}).status_code == 400
