"""The verification commands. ``seedproxy verify`` asks a running proxy to replay a
session (exit 0 when every interaction matched, 1 at the first divergence, printed as
one line). ``seedproxy verify-logprobs`` teacher-forces a trajectory through an engine
and compares every sampled token's recorded logprob with the recomputed one.

Each branch of the session's ``concat`` export is sent once to ``/generate`` with
``max_new_tokens: 0`` and ``logprob_start_len: 0``, once per temperature its turns
used. Recomputed logprobs are rounded to float32 (as recorded) before comparing; the
default tolerance is 0. With no ``--engine``, the requests go through the proxy's own
``/generate`` (outside any session) to its embedded engine, whose key only it holds.
"""

from __future__ import annotations

from array import array
from typing import Any
from urllib.parse import quote

import httpx

from ..errors import ConfigError

__all__ = ["verify_logprobs", "verify_session"]

EXIT_DIVERGED = 1


def _get(client: httpx.Client, url: str, *, what: str | None = None, **kwargs: Any) -> Any:
    """``url``'s JSON answer; ``ConfigError`` naming ``what`` (default: ``url``) unless
    it answered 200."""
    try:
        reply = client.request(url=url, **kwargs)
    except httpx.HTTPError as exc:
        raise ConfigError(f"cannot reach {what or url}: {type(exc).__name__}") from None
    if reply.status_code != 200:
        raise ConfigError(f"{what or url} answered {reply.status_code}: {reply.text[:200]}")
    return reply.json()


def verify_session(url: str, session_id: str, *, admin_key: str | None) -> int:
    headers = {"authorization": f"Bearer {admin_key}"} if admin_key else {}
    target = f"{url.rstrip('/')}/sessions/{quote(session_id, safe='')}/verify"
    with httpx.Client(timeout=None, headers=headers) as client:
        report = _get(client, target, what=url, method="POST")
    divergence = report["first_divergence"]
    if divergence is None:
        print(f"{session_id}: verified {report['checked']} interactions "
              f"({report['skipped']} skipped): tokens and logprobs identical")
        return 0
    expected, got = divergence["expected"], divergence["got"]
    print(f"{session_id}: DIVERGED at request_index {divergence['request_index']} "
          f"({divergence['interaction_id']}), choice {divergence['choice']}, position "
          f"{divergence['position']}: expected token {expected['token_id']} "
          f"(logprob {expected['logprob']}), got {got['token_id']} (logprob {got['logprob']})")
    return EXIT_DIVERGED


def _temperature(request: Any) -> float:
    value = request.get("temperature") if isinstance(request, dict) else None
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 1.0


def _owners(mask: list[int], interaction_ids: list[str]) -> dict[int, str]:
    """Sampled position -> the interaction that sampled it (the k-th run of mask 1
    is the k-th turn's completion)."""
    owners: dict[int, str] = {}
    run = -1
    for position, bit in enumerate(mask):
        if bit and (position == 0 or not mask[position - 1]):
            run += 1
        if bit and run < len(interaction_ids):
            owners[position] = interaction_ids[run]
    return owners


def verify_logprobs(url: str, engine: str | None, session: str, *,
                    admin_key: str | None = None, tolerance: float = 0.0) -> int:
    """Print one line per branch; return 0 when every sampled token matches."""
    headers = {"authorization": f"Bearer {admin_key}"} if admin_key else {}
    with httpx.Client(timeout=600, headers=headers) as client:
        root = url.rstrip("/")
        if engine is None:  # the proxy itself, when its GET /fleet names an embedded engine
            if not isinstance(_get(client, f"{root}/fleet", method="GET").get("engine"), str):
                raise ConfigError(f"the proxy at {url} runs no embedded engine (it was started "
                                  "with --upstream): pass --engine with that server's root URL")
            engine = url
        trajectory = f"{root}/sessions/{session}/trajectory"
        data = _get(client, trajectory, method="GET", params={"style": "concat"})
        branches = data.get("branches")
        if branches is None:
            if data.get("token_ids") is None:
                raise ConfigError(f"session {session} has no exact token sequence: "
                                  f"{data.get('concat_error')}")
            branches = [{"branch_id": "-", **data}]
        turns = _get(client, trajectory, method="GET")["interactions"]
        temperature = {t["interaction_id"]: _temperature(t.get("request")) for t in turns}
        worst, failed = 0.0, 0
        for branch in branches:
            owners = _owners(branch["loss_mask"], branch["interaction_ids"])
            recomputed: dict[float, array[float]] = {}
            for temp in sorted({temperature.get(o, 1.0) for o in owners.values()}):
                forced = _get(client, f"{engine.rstrip('/')}/generate", method="POST", json={
                    "input_ids": branch["token_ids"], "return_logprob": True,
                    "logprob_start_len": 0,
                    "sampling_params": {"max_new_tokens": 0, "temperature": temp}})
                entries = forced["meta_info"]["input_token_logprobs"]
                recomputed[temp] = array("f", [e[0] if e[0] is not None else 0.0
                                               for e in entries])
            diffs = [abs(recomputed[temperature.get(owner, 1.0)][position]
                         - branch["logprobs"][position]) for position, owner in owners.items()]
            worst = max([worst, *diffs])
            bad = sum(diff > tolerance for diff in diffs)
            failed += bad
            print(f"branch {branch['branch_id']}: {len(diffs)} sampled tokens, "
                  f"{len(diffs) - bad} match, max |diff| {worst:.3g}")
    return 0 if failed == 0 else 1
