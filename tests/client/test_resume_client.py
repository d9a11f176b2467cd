"""seedproxy.client's ``resume`` and ``fork`` against a real proxy in front of the fake
SGLang: a rerun agent reaches its crash point from the record (no upstream call), and
forks branch from a prefix with their own seeds."""

from __future__ import annotations

import asyncio
from typing import Any

from seedproxy import derive_seed
from seedproxy.client import Sample, SeedProxyAPIError, SeedProxyClient
from tests.conftest import Fake


def agent(turns: int) -> Any:
    async def run(sample: Sample) -> list[str]:
        client = sample.async_openai(max_retries=0)
        messages: list[Any] = []
        said = []
        for turn in range(turns):
            messages.append({"role": "user", "content": f"turn {turn}"})
            answer = await client.chat.completions.create(model="m", messages=messages,
                                                          max_tokens=3)
            text = answer.choices[0].message.content or ""
            messages.append({"role": "assistant", "content": text})
            said.append(text)
        await client.close()
        return said
    return run


def test_resume_and_fork_through_the_client(fake: Fake, proxy: str) -> None:
    async def main() -> None:
        async with SeedProxyClient(proxy) as sp:
            first = await sp.create_group("job")
            (crashed,) = await first.run(agent(2))
            resumed = await sp.resume("job")
            assert [(s.session_id, s.identity) for s in resumed.samples] == [("job-1", "job")]
            count = len(fake.received)
            (rerun,) = await resumed.run(agent(4))
            assert rerun[:2] == crashed
            assert [r["seed"] for r in fake.received[count:]] == [derive_seed("job", 2),
                                                                  derive_seed("job", 3)]
            record = await sp.trajectory("job-1")
            assert [i.replayed for i in record.interactions] == [
                True, True, False, False]
            forks = await sp.fork("job", 1, "job.b", k=2)
            count = len(fake.received)
            branches = await forks.run(agent(2))
            assert [b[0] for b in branches] == [crashed[0], crashed[0]]
            live = sorted(r["seed"] for r in fake.received[count:])
            assert live == sorted([derive_seed("job.b:0", 1), derive_seed("job.b:1", 1)])
            try:
                await sp.resume("nobody")
            except SeedProxyAPIError as exc:
                assert exc.status_code == 404
            else:
                raise AssertionError("resuming an unknown session succeeded")

    asyncio.run(main())
