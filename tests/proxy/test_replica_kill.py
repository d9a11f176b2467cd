"""Three ``seedproxy serve`` replicas on one Redis, every request sent to the next one
(round robin), one replica SIGKILLed under load and started again: every turn is
answered (a client retries what the dead replica dropped, with
``x-stainless-retry-count``), each session's indices are taken exactly once, in turn
order, seeds by the rule, and the record holds what each client was told."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Fake
from tests.helpers.serving import Serving
from tests.helpers.turn_load import TurnLoad, check_recorded


@pytest.fixture
def replicas() -> Iterator[list[Serving]]:
    started: list[Serving] = []
    yield started
    for replica in started:
        replica.stop()


def test_a_replica_sigkilled_under_load_and_restarted_loses_no_turn_and_reuses_no_index(
    fake: Fake, redis_url: str, replicas: list[Serving], tmp_path: Path
) -> None:
    def start(n: int) -> Serving:
        replicas.append(Serving("--upstream", fake.url, "--store", redis_url,
                                log=tmp_path / f"replica-{n}.log"))
        return replicas[-1]

    for n in range(3):
        start(n)
    urls = [replica.wait().url for replica in replicas]
    fake.switches.token_delay_s = 0.002
    sessions, turns = [f"rk-{n}" for n in range(30)], 5
    load = TurnLoad(urls, sessions=sessions, turns=turns, workers=10)
    runner = threading.Thread(target=load.run)
    runner.start()
    load.wait_for(40)
    replicas[1].kill()
    restarted = start(3).wait()
    urls[1] = restarted.url
    runner.join(timeout=300)
    assert not runner.is_alive()
    assert len(load.answers) == len(sessions) * turns
    assert load.failures > 0 and any(a.tries for a in load.answers)  # the kill was felt
    check_recorded(urls[0], load.answers, sessions, turns)
    for replica in (replicas[0], replicas[2], restarted):
        assert "Traceback" not in replica.text()
