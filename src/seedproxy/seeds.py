"""Seed derivation: pure functions of (identity, index), or of (identity, content key,
occurrence) in the content-keyed mode; no clock, no randomness, no process state.
``derive_seed`` is AReaL's rule, so a rollout replayed through seedproxy or AReaL's
proxy samples with the same seeds.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

__all__ = ["CONTENT_IGNORED", "MAX_SEED", "choice_seeds", "client_choice_seeds", "content_key",
           "content_seeds", "derive_seed", "answer_basis"]

MAX_SEED = 0x7FFFFFFF


def derive_seed(identity: str, index: int) -> int:
    """The 31-bit sampling seed of request ``index`` (a non-negative int) in rollout
    ``identity``."""
    if isinstance(index, bool) or not isinstance(index, int):
        raise TypeError(f"index must be an int, not {type(index).__name__}")
    if index < 0:
        raise ValueError(f"index must be non-negative, got {index}")
    digest = hashlib.sha256(f"{identity}:{index}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & MAX_SEED


def choice_seeds(identity: str, index: int, n: int) -> list[int]:
    """One seed per choice of an ``n``-choice request: choice 0 keeps
    ``derive_seed(identity, index)`` (``n=1`` and ``n>1`` agree on their first sample),
    choice ``i >= 1`` is ``derive_seed(f"{identity}:{index}", i)``."""
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    first = derive_seed(identity, index)
    return [first] + [derive_seed(f"{identity}:{index}", i) for i in range(1, n)]


def client_choice_seeds(seed: int, n: int) -> list[int]:
    """The same for a request that brought its own ``seed``: choice 0 keeps it, choice
    ``i >= 1`` is ``derive_seed(str(seed), i)``."""
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    return [seed] + [derive_seed(str(seed), i) for i in range(1, n)]


CONTENT_IGNORED = ("seed", "stream", "stream_options", "user", "metadata", "rid")
"""Top-level body keys left out of a content key: they change nothing the model is
asked (``sampling_params.sampling_seed`` of ``/generate`` is left out as well)."""


def content_key(endpoint: str, body: dict[str, Any],
                ignored: tuple[str, ...] = CONTENT_IGNORED) -> str:
    """The content key of a request: the sha256 hex digest of the canonical JSON (sorted
    keys, no whitespace, UTF-8, non-ASCII unescaped) of ``{"endpoint": endpoint,
    "request": body without the ``ignored`` keys}`` (``CONTENT_IGNORED`` unless given;
    ``sampling_params.sampling_seed`` goes with ``seed``)."""
    kept = {k: v for k, v in body.items() if k not in ignored}
    params = kept.get("sampling_params")
    if "seed" in ignored and isinstance(params, dict) and "sampling_seed" in params:
        kept["sampling_params"] = {k: v for k, v in params.items() if k != "sampling_seed"}
    canonical = json.dumps({"endpoint": endpoint, "request": kept}, sort_keys=True,
                           separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def content_seeds(identity: str, key: str, occurrence: int, n: int) -> list[int]:
    """The seeds of the ``occurrence``-th request (from 0) with content ``key`` in rollout
    ``identity``: ``choice_seeds(f"{identity}:{key}", occurrence, n)``, so choice 0 gets
    ``int(sha256(f"{identity}:{key}:{occurrence}")[:4]) & MAX_SEED``."""
    return choice_seeds(f"{identity}:{key}", occurrence, n)


def answer_basis(identity: str, position: str) -> str:
    """The 24-hex basis of the ids a request's answer shows its client (``chatcmpl-``,
    ``cmpl-``, ``call_``...): a pure function of the rollout ``identity`` and the
    request's ``position`` in it (its index, or its content key and occurrence), so a
    replay of the same identity shows the same ids."""
    return hashlib.sha256(f"answer:{identity}:{position}".encode()).hexdigest()[:24]
