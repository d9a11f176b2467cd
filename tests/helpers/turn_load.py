"""Sessions × turns sent by client threads to proxies that may die, as an agent fleet's
SDKs send them: each session's turns in order, every request to the next proxy in
``urls`` (round robin), and a turn that failed (a broken connection or a 5xx) sent again,
same body, with ``x-stainless-retry-count`` (the OpenAI SDK's retry header) until it is
answered. ``urls`` may be changed while it runs (a proxy restarted on a new port)."""

from __future__ import annotations

import itertools
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx

from seedproxy import derive_seed

__all__ = ["Answer", "TurnLoad", "check_recorded", "turn_body"]


@dataclass(frozen=True)
class Answer:
    """A 200 the client got: what it was told."""

    session: str
    turn: int
    index: int
    seed: int
    content: str
    tries: int


def turn_body(session: str, turn: int) -> dict[str, Any]:
    return {"model": "m", "max_tokens": 4,
            "messages": [{"role": "user", "content": f"{session} turn {turn}"}]}


class TurnLoad:
    """``run()`` sends ``turns`` turns of each of ``sessions`` sessions over ``workers``
    threads; ``answers`` fills as 200s arrive (``wait_for(n)`` waits for n of them)."""

    def __init__(self, urls: list[str], *, sessions: list[str], turns: int, workers: int,
                 give_up_s: float = 180.0) -> None:
        self.urls, self.sessions, self.turns = urls, sessions, turns
        self.answers: list[Answer] = []
        self.failures = 0
        self._workers, self._give_up_s = workers, give_up_s
        self._changed = threading.Condition()
        self._next = itertools.count()

    def wait_for(self, count: int, timeout_s: float = 180.0) -> None:
        with self._changed:
            if not self._changed.wait_for(lambda: len(self.answers) >= count, timeout_s):
                raise TimeoutError(f"{len(self.answers)} answers, not {count}, in {timeout_s}s")

    def run(self) -> list[Answer]:
        with ThreadPoolExecutor(self._workers) as pool:
            for result in pool.map(self._session, self.sessions):
                assert result is None
        return self.answers

    def _session(self, session: str) -> None:
        with httpx.Client(timeout=60) as http:
            for turn in range(self.turns):
                answer = self._turn(http, session, turn)
                with self._changed:
                    self.answers.append(answer)
                    self._changed.notify_all()

    def _turn(self, http: httpx.Client, session: str, turn: int) -> Answer:
        deadline, tries = time.monotonic() + self._give_up_s, 0
        while True:
            url = self.urls[next(self._next) % len(self.urls)]
            headers = {"x-stainless-retry-count": str(tries)} if tries else {}
            try:
                reply = http.post(f"{url}/sessions/{session}/v1/chat/completions",
                                  json=turn_body(session, turn), headers=headers)
            except httpx.TransportError:
                reply = None
            if reply is not None and reply.status_code == 200:
                index = int(reply.headers["x-seedproxy-request-index"])
                return Answer(session, turn, index, int(reply.headers["x-seedproxy-seed"]),
                              reply.json()["choices"][0]["message"]["content"], tries)
            assert reply is None or reply.status_code >= 500, (reply.status_code, reply.text)
            with self._changed:
                self.failures += 1
            if time.monotonic() > deadline:
                raise TimeoutError(f"{session} turn {turn} unanswered after {tries + 1} tries")
            tries += 1
            time.sleep(0.05)


def check_recorded(url: str, answers: list[Answer], sessions: list[str], turns: int) -> None:
    """Every session's answered turns took indices 0..turns-1 in turn order, seeds by the
    rule, and the record at ``url`` holds exactly those indices once each, with the
    seed and content each client was told."""
    told = {(a.session, a.turn): a for a in answers}
    assert sorted(told) == [(s, t) for s in sorted(sessions) for t in range(turns)]
    with httpx.Client(base_url=url, timeout=60) as http:
        for session in sessions:
            mine = [told[session, t] for t in range(turns)]
            assert [a.index for a in mine] == list(range(turns)), session
            assert all(a.seed == derive_seed(session, a.index) for a in mine)
            got = http.get(f"/sessions/{session}/trajectory")
            assert got.status_code == 200, got.text
            recorded = got.json()["interactions"]
            assert [i["request_index"] for i in recorded] == list(range(turns)), session
            for item, answer in zip(recorded, mine, strict=True):
                assert item["status"] == 200
                assert item["seed"] == answer.seed
                content = item["response"]["choices"][0]["message"]["content"]
                assert content == answer.content, (session, answer.turn)
