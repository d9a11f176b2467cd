"""Writing exports: JSON Lines (any style) and Parquet (``concat`` style, for trainers).

Parquet needs pyarrow: ``pip install -e '.[parquet]'``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import IO, Any

from ._types import Trajectory

__all__ = ["write_jsonl", "write_parquet"]


def write_jsonl(trajectories: Iterable[Trajectory], out: str | os.PathLike[str] | IO[bytes]) -> int:
    """Write one sorted-key JSON object per line to a path (replaced) or an open
    binary file (appended to); return how many were written."""
    if isinstance(out, str | os.PathLike):
        with open(out, "wb") as handle:
            return write_jsonl(trajectories, handle)
    written = 0
    for trajectory in trajectories:  # streamed: one trajectory in memory at a time
        out.write(trajectory.to_json() + b"\n")
        written += 1
    return written


def write_parquet(trajectories: Iterable[Trajectory], path: str | os.PathLike[str]) -> int:
    """Write ``concat``-style trajectories as rows of ``session_id, identity,
    group_id, input_ids, loss_mask, logprobs, reward``; return the row count.

    Raises ValueError for an ``individual`` record or one whose turns do not
    concatenate (``concat_error``): a trainer must not get a guessed sequence.
    """
    try:
        import pyarrow as pa  # type: ignore[import-untyped]
        import pyarrow.parquet as pq  # type: ignore[import-untyped]
    except ImportError as exc:
        raise ImportError("Parquet export needs pyarrow: pip install -e '.[parquet]'") from exc
    schema = pa.schema([
        ("session_id", pa.string()),
        ("identity", pa.string()),
        ("group_id", pa.string()),
        ("input_ids", pa.list_(pa.int32())),
        ("loss_mask", pa.list_(pa.int8())),
        ("logprobs", pa.list_(pa.float32())),
        ("reward", pa.float64()),
    ])
    rows: list[dict[str, Any]] = []
    for t in trajectories:
        if t.style != "concat" or t.token_ids is None or t.loss_mask is None:
            why = t.concat_error.reason if t.concat_error else "not exported with style='concat'"
            raise ValueError(f"session {t.session_id!r} has no token sequence: {why}")
        rows.append({"session_id": t.session_id, "identity": t.identity, "group_id": t.group_id,
                     "input_ids": t.token_ids, "loss_mask": t.loss_mask,
                     "logprobs": t.logprobs, "reward": t.reward})
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
    return len(rows)
