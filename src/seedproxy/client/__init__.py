"""``seedproxy.client``: drive seedproxy from an RL loop over HTTP.

    async with SeedProxyClient(url) as proxy:
        group = await proxy.create_group("task7", k=8)
        await group.run(agent, concurrency=4, reward=score, end=True)
        await group.export(out="rollouts.jsonl")  # written, fsynced, then acknowledged
"""

from __future__ import annotations

from ._client import EXPORT_MARGIN_S, ExportBatch, Group, Sample, SeedProxyAPIError, SeedProxyClient
from ._files import write_jsonl, write_parquet
from ._segments import Segment, segments
from ._trainers import to_skyrl, to_slime, to_tinker, to_tinker_objects, to_trl, to_verl
from ._types import ConcatError, Interaction, Style, Trajectory

__all__ = [
    "EXPORT_MARGIN_S",
    "ConcatError",
    "ExportBatch",
    "Group",
    "Interaction",
    "Sample",
    "SeedProxyAPIError",
    "SeedProxyClient",
    "Segment",
    "Style",
    "Trajectory",
    "segments",
    "to_skyrl",
    "to_slime",
    "to_tinker",
    "to_tinker_objects",
    "to_trl",
    "to_verl",
    "write_jsonl",
    "write_parquet",
]
