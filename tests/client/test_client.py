"""seedproxy.client against a real proxy in front of the fake SGLang and of the engine
(tiny random model): groups of multi-turn agents, rewards, export, files."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import orjson
import pytest

from seedproxy import derive_seed
from seedproxy.client import (
    Sample,
    SeedProxyAPIError,
    SeedProxyClient,
    Trajectory,
    write_jsonl,
    write_parquet,
)
from tests.helpers.fake_sglang import Switches, create_fake_sglang
from tests.helpers.servers import ServerThread
from tests.helpers.waiting import HANG_S

ADMIN = "client-test-admin"
TURNS = ("Plan task {n}.", "Check it.", "Answer.")


@pytest.fixture(scope="module", params=["fake-sglang", "engine"])
def upstream(request: pytest.FixtureRequest) -> Iterator[str]:
    if request.param == "fake-sglang":
        with ServerThread(create_fake_sglang(Switches())) as server:
            yield server.url
        return
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from seedproxy.engine import start_engine_thread
    from seedproxy.engine.testing import tiny_model

    running = start_engine_thread(tiny_model())
    yield running.url
    running.stop()


def score(text: str) -> float:
    return round(len(set(text)) / (1 + len(text)), 6)


class Agents:
    """A multi-turn chat agent that counts how many of its copies run at once."""

    def __init__(self) -> None:
        self.running = 0
        self.most = 0

    async def __call__(self, sample: Sample) -> str:
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            messages: list[Any] = [{"role": "system", "content": "Be brief."}]
            reply = ""
            async with sample.async_openai(max_retries=0, timeout=HANG_S) as client:
                for n, prompt in enumerate(TURNS):
                    messages.append({"role": "user", "content": prompt.format(n=n)})
                    answer = await client.chat.completions.create(
                        model="default", messages=messages, max_tokens=6, temperature=1.0
                    )
                    reply = answer.choices[0].message.content or ""
                    messages.append({"role": "assistant", "content": reply})
            return reply
        finally:
            self.running -= 1


async def rollout_group(url: str, identity: str) -> tuple[list[str], list[Trajectory], int]:
    agents = Agents()
    async with SeedProxyClient(url, admin_key=ADMIN, timeout_s=HANG_S) as proxy:
        group = await proxy.create_group(identity, k=8, metadata={"task": identity})
        replies = await group.run(agents, concurrency=3, reward=score, end=True)
        exported = await group.export(timeout_s=30)
    return replies, exported, agents.most


def test_eight_multi_turn_agents_run_with_rewards_through_export(
    upstream: str, start_proxy: Callable[..., str], tmp_path: Path
) -> None:
    proxy = start_proxy([upstream], admin_key=ADMIN)
    replies, exported, most = asyncio.run(rollout_group(proxy, "grp"))
    assert 1 <= most <= 3
    assert [t.session_id for t in exported] == [f"grp:{i}" for i in range(8)]
    for i, (reply, t) in enumerate(zip(replies, exported, strict=True)):
        assert t.identity == f"grp:{i}" and t.metadata == {"task": "grp"}
        assert t.reward == score(reply) and t.interactions[-1].reward == t.reward
        assert [x.request_index for x in t.interactions] == [0, 1, 2]
        assert [x.seed for x in t.interactions] == [derive_seed(t.identity, k) for k in range(3)]
        for x in t.interactions:  # the random engine model may stop early
            assert x.prompt_token_ids and 1 <= len(x.completion_token_ids) <= 6
            assert x.finish_reason == "length" or len(x.completion_token_ids) < 6
        assert t.interactions[-1].response["choices"][0]["message"]["content"] == reply

    out = tmp_path / "rollouts.jsonl"
    assert write_jsonl(exported, out) == 8
    lines = out.read_bytes().splitlines()
    assert lines == [orjson.dumps(t.raw, option=orjson.OPT_SORT_KEYS) for t in exported]
    assert Trajectory.from_json(orjson.loads(lines[3])) == exported[3]
    handle, written_before = io.BytesIO(), []

    def one_at_a_time() -> Iterator[Trajectory]:  # an export streamed to disk
        for t in exported:
            written_before.append(handle.getvalue().count(b"\n"))
            yield t

    assert write_jsonl(one_at_a_time(), handle) == 8
    assert written_before == list(range(8))  # each line is out before the next is read
    assert handle.getvalue().splitlines() == lines


def test_a_group_replayed_under_the_same_identity_gets_the_same_tokens(
    fake: Any, start_proxy: Callable[..., str]
) -> None:
    proxy = start_proxy([fake.url], admin_key=ADMIN)
    _, exported, _ = asyncio.run(rollout_group(proxy, "grp"))
    _, replayed, _ = asyncio.run(rollout_group(proxy, "grp"))
    assert [t.session_id for t in replayed] == [f"grp:{i}-1" for i in range(8)]
    assert [[x.completion_token_ids for x in t.interactions] for t in replayed] == [
        [x.completion_token_ids for x in t.interactions] for t in exported
    ]


def test_sync_clients_reach_only_their_own_session(
    fake: Any, start_proxy: Callable[..., str]
) -> None:
    proxy = start_proxy([fake.url], admin_key=ADMIN)

    async def made() -> list[Sample]:
        async with SeedProxyClient(proxy, admin_key=ADMIN) as client:
            return (await client.create_group("sync", k=2)).samples

    first, second = asyncio.run(made())
    with first.openai(max_retries=0) as client:
        answer = client.chat.completions.with_raw_response.create(
            model="default", messages=[{"role": "user", "content": "hi"}], max_tokens=4
        )
    assert answer.headers["x-seedproxy-session"] == "sync:0"
    assert answer.headers["x-seedproxy-seed"] == str(derive_seed("sync:0", 0))
    foreign = openai.OpenAI(base_url=second.base_url, api_key=first.api_key, max_retries=0)
    with foreign, pytest.raises(openai.PermissionDeniedError):
        foreign.chat.completions.create(
            model="default", messages=[{"role": "user", "content": "hi"}], max_tokens=4
        )


def test_admin_errors_come_back_typed(fake: Any, start_proxy: Callable[..., str]) -> None:
    proxy = start_proxy([fake.url], admin_key=ADMIN)

    async def attempt(key: str | None, k: int) -> None:
        async with SeedProxyClient(proxy, admin_key=key) as client:
            await client.create_group("x", k=k)

    with pytest.raises(SeedProxyAPIError) as missing:
        asyncio.run(attempt(None, 1))
    assert missing.value.status_code == 401
    with pytest.raises(SeedProxyAPIError) as bad:
        asyncio.run(attempt(ADMIN, 0))
    assert bad.value.status_code == 400 and "group_size" in bad.value.message


def test_concat_exports_go_to_parquet_for_trainers(
    fake: Any, start_proxy: Callable[..., str], tmp_path: Path
) -> None:
    """Token-in agents (each turn's prompt = the previous prompt + completion + new
    ids) concatenate; chat agents on the fake drift, and Parquet refuses them."""
    pq = pytest.importorskip("pyarrow.parquet")
    proxy = start_proxy([fake.url])

    async def run() -> tuple[list[Trajectory], list[Trajectory]]:
        async with SeedProxyClient(proxy) as client:

            async def tokens_in(sample: Sample) -> None:
                history = [ord(c) for c in f"task {sample.identity}:"]
                async with sample.async_openai(max_retries=0) as oai:
                    for turn in range(3):
                        await oai.completions.create(model="default", prompt=history, max_tokens=5)
                        last = (await client.trajectory(sample.session_id)).interactions[-1]
                        assert isinstance(last.completion_token_ids[0], int)
                        history = [
                            *last.prompt_token_ids,
                            *last.completion_token_ids,  # type: ignore[list-item]
                            *(ord(c) for c in f" then {turn}:"),
                        ]

            group = await client.create_group("tok", k=4)
            await group.run(tokens_in, reward=lambda _: 1.0, end=True)
            concat = await group.export(style="concat")
            chat = await client.create_group("chat", k=1)
            await chat.run(Agents(), end=True)
            return concat, await chat.export(style="concat")

    concat, drifted = asyncio.run(run())
    path = tmp_path / "batch.parquet"
    assert write_parquet(concat, path) == 4
    table = pq.read_table(path).to_pydict()
    assert table["session_id"] == [f"tok:{i}" for i in range(4)]
    for row, t in enumerate(concat):
        assert t.concat_error is None and t.token_ids and t.loss_mask and t.logprobs
        assert table["input_ids"][row] == t.token_ids
        assert table["loss_mask"][row] == t.loss_mask and sum(t.loss_mask) == 15
        assert table["logprobs"][row] == pytest.approx(t.logprobs, abs=1e-6)
        assert table["reward"][row] == 1.0
    assert drifted[0].concat_error is not None and drifted[0].concat_error.turn == 1
    with pytest.raises(ValueError, match="session 'chat' has no token sequence"):
        write_parquet(drifted, tmp_path / "no.parquet")
