"""What every harness test checks, once: a proxy in token-in-token-out mode (Qwen3's
tokenizer, template and parsers) in front of the scripted Qwen3, or in passthrough mode
in front of the fake SGLang's chat route; sessions; the record of a run.

A harness run is checked on its *main* turns: the requests that offered the shell tool
(a harness may add side requests, such as opencode's title). They are ``ROUNDS`` calls
and the answer; every main turn after the first extends the one before it (the
record's ``lineage.extends``, the interaction's ``tito["extends"]``, names it); each
turn's exported completion ids are the ids the scripted model returned for that turn's
prompt; and seeds are ``seed(identity, index)``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from seedproxy import derive_seed
from tests.helpers.fake_sglang import Switches, create_fake_sglang
from tests.helpers.real_tokenizers import tokenizer_dir
from tests.helpers.scripted_qwen3 import MARKER, ROUNDS, ScriptedQwen3
from tests.helpers.servers import ServerThread

__all__ = ["Session", "check_passthrough", "check_replay", "check_tito", "open_session",
           "passthrough_proxy", "tito_proxy"]


class Session:
    """One seedproxy session: its id, its OpenAI base URL (ending ``/v1``) and key."""

    def __init__(self, made: dict[str, Any]) -> None:
        self.id = str(made["session_id"])
        self.base_url = str(made["base_url"])
        self.api_key = str(made["api_key"])


def open_session(proxy: str, identity: str) -> Session:
    made = httpx.post(f"{proxy}/sessions", json={"identity": identity}, timeout=60).json()
    return Session(made["sessions"][0])


@contextmanager
def tito_proxy(start_proxy: Callable[..., str], scripted: ScriptedQwen3,
               **overrides: Any) -> Iterator[str]:
    """A token-in-token-out proxy (Qwen3, hermes tool calls) in front of ``scripted``."""
    with ServerThread(create_fake_sglang(scripted.switches())) as upstream:
        yield start_proxy([upstream.url], token_in_token_out=True,
                          tokenizer=str(tokenizer_dir("qwen3")), tool_parser="hermes",
                          reasoning_parser="think", **overrides)


@contextmanager
def passthrough_proxy(start_proxy: Callable[..., str],
                      switches: Switches) -> Iterator[str]:
    """A proxy in its default (passthrough) mode in front of the fake SGLang."""
    with ServerThread(create_fake_sglang(switches)) as upstream:
        yield start_proxy([upstream.url])


def interactions(proxy: str, session: str) -> list[dict[str, Any]]:
    got = httpx.get(f"{proxy}/sessions/{session}/trajectory", timeout=60).json()
    turns: list[dict[str, Any]] = got["interactions"]
    return turns


def _offers(turn: dict[str, Any], shell: str) -> bool:
    request = turn.get("request") or {}
    for tool in request.get("tools") or []:
        if shell in (tool.get("name"), (tool.get("function") or {}).get("name")):
            return True
    return False


def check_tito(proxy: str, session: str, scripted: ScriptedQwen3, shell: str | None = None,
               ) -> list[dict[str, Any]]:
    """The run's record, checked as the module says; returns its main turns. ``shell``
    picks the main turns by the tool they offer (None: every turn is a main turn)."""
    # in request order (a content-keyed session lists its turns by content key)
    turns = sorted(interactions(proxy, session), key=lambda t: int(t["request_index"]))
    returned = {tuple(prompt): ids for prompt, ids in scripted.pairs}
    assert len(turns) == len(scripted.pairs), (len(turns), len(scripted.pairs))
    for turn in turns:
        assert turn["status"] == 200, turn
        assert returned[tuple(turn["prompt_token_ids"])] == turn["completion_token_ids"]
    main = [t for t in turns if shell is None or _offers(t, shell)]
    assert len(main) == ROUNDS + 1, [t["request_index"] for t in main]
    assert main[0]["lineage"]["extends"] is None
    for before, after in zip(main, main[1:], strict=False):
        assert after["lineage"]["extends"]["interaction_id"] == before["interaction_id"]
        assert after["prompt_token_ids"][:len(before["prompt_token_ids"])] == \
            before["prompt_token_ids"]
    last = scripted.tok.decode(main[-1]["completion_token_ids"])
    assert last.startswith("DONE ") or scripted.text_actions, last
    assert MARKER in scripted.tok.decode(main[-1]["prompt_token_ids"])
    return main


def check_exported(proxy: str, session: str, scripted: ScriptedQwen3) -> None:
    """The export of the ended session carries, turn by turn, the ids the model returned."""
    httpx.post(f"{proxy}/sessions/{session}/end", timeout=60).raise_for_status()
    batch = httpx.post(f"{proxy}/trajectories/export",
                       json={"session_ids": [session]}, timeout=60).json()
    (trajectory,) = batch["trajectories"]
    returned = {tuple(prompt): ids for prompt, ids in scripted.pairs}
    exported = [(t["prompt_token_ids"], t["completion_token_ids"])
                for t in trajectory["interactions"]]
    assert [ids for _, ids in exported] == [returned[tuple(p)] for p, _ in exported]
    httpx.post(f"{proxy}/trajectories/ack", json={"batch_id": batch["batch_id"]},
               timeout=60).raise_for_status()


def check_replay(proxy: str, first: str, again: str, *, by_arrival: bool = True) -> None:
    """A second session of the same identity got the first session's seeds and tokens.
    ``by_arrival`` (the default index mode): turn by turn, the seeds being
    ``seed(identity, index)`` (a harness's tool results may differ between runs: qwen-code
    prints the command's process group id). Else (content-keyed seeds): request by
    request, the same prompt getting the same seed and tokens."""
    one, two = interactions(proxy, first), interactions(proxy, again)
    assert len(one) == len(two)
    if by_arrival:
        assert [t["seed"] for t in one] == [derive_seed(first, k) for k in range(len(one))]
        assert [(t["seed"], t["completion_token_ids"]) for t in two] == [
            (t["seed"], t["completion_token_ids"]) for t in one]
        return
    same = {tuple(t["prompt_token_ids"]): t for t in one}
    for turn in two:
        match = same[tuple(turn["prompt_token_ids"])]
        assert (turn["seed"], turn["completion_token_ids"]) == (
            match["seed"], match["completion_token_ids"]), turn["request_index"]


def check_passthrough(proxy: str, session: str, shell: str) -> list[dict[str, Any]]:
    """A passthrough run: the shell tool was called ``ROUNDS`` times, its results went
    back, and the harness got its answer; seeds are ``seed(identity, index)``."""
    turns = interactions(proxy, session)
    assert [t["seed"] for t in turns] == [derive_seed(session, k) for k in range(len(turns))]
    main = [t for t in turns if _offers(t, shell)]
    assert len(main) == ROUNDS + 1, [t["request_index"] for t in main]
    assert all(t["status"] == 200 for t in turns)
    assert MARKER in str(main[-1]["request"])
    return main
