"""Bodies of the admin routes (OpenAI-route bodies are not modelled: ``request.py``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, model_validator

from ..settings import MAX_URL_LENGTH

__all__ = ["AckRequest", "CreateSessions", "DestroyWeightsUpdateGroup", "ExportRequest",
           "FleetPause", "FleetUpdateWeights", "FleetUpstream", "FleetWeightVersion",
           "ForkFrom", "InitWeightsUpdateGroup", "RewardRequest",
           "UpdateWeightsFromDistributed", "UpdateWeightsFromTensor"]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ForkFrom(_Body):
    session: str = Field(min_length=1, max_length=256)
    at: int = Field(ge=0, lt=2**53)


class CreateSessions(_Body):
    session_id: str | None = Field(default=None, min_length=1, max_length=256)
    identity: str | None = Field(default=None, min_length=1, max_length=256)
    group_size: int = Field(default=1, ge=1, le=4096)
    metadata: dict[str, Any] | None = None
    seed: int | None = Field(default=None, ge=-(2**63), lt=2**63)
    index_by: Literal["arrival", "content"] | None = None
    resume: str | None = Field(default=None, min_length=1, max_length=256)
    """Replay this recorded session: matching requests are answered from its record."""
    fork: ForkFrom | None = None
    """Replay the first ``at`` interactions of ``session``, then sample with new seeds."""


class RewardRequest(_Body):
    reward: float = Field(allow_inf_nan=False)
    interaction_id: str | None = None


class ExportRequest(_Body):
    session_ids: list[str] | None = None
    group_id: str | None = None
    count: int | None = Field(default=None, ge=1)
    timeout_s: float = Field(default=0.0, ge=0, le=3600)
    remove: StrictBool = False
    style: Literal["individual", "concat"] = "individual"
    visibility_timeout_s: float = Field(default=300.0, gt=0, le=86400)
    """How long the batch stays leased without an ack before it is exported again."""
    skip_abandoned: StrictBool = False
    """Lease sessions ended as abandoned with the batch, but deliver none of them."""


class AckRequest(_Body):
    batch_id: str = Field(min_length=1, max_length=256)


class FleetPause(_Body):
    mode: Literal["abort", "in_place", "retract"] = "abort"


class FleetUpstream(_Body):
    url: StrictStr = Field(min_length=1, max_length=MAX_URL_LENGTH)


class FleetWeightVersion(_Body):
    version: str = Field(min_length=1, max_length=256)
    abort_all_requests: StrictBool = False


class FleetUpdateWeights(_Body):
    model_path: StrictStr = Field(min_length=1, max_length=4096)
    version: StrictStr = Field(min_length=1, max_length=256)
    mode: Literal["abort", "in_place", "retract"] = "in_place"
    load_format: StrictStr | None = Field(default=None, min_length=1, max_length=64)


_GROUP = Field(default="weight_update_group", min_length=1, max_length=256)
_NAMES = Field(max_length=100_000)


class InitWeightsUpdateGroup(_Body):
    """SGLang's ``InitWeightsUpdateGroupReqInput``, for the whole fleet: upstream ``i``
    (in ``GET /fleet`` order) joins at ``rank_offset + i * rank_stride`` (``rank_stride``:
    the ranks one server takes, its TP size)."""

    master_address: StrictStr = Field(min_length=1, max_length=256)
    master_port: StrictInt = Field(ge=1, le=65535)
    rank_offset: StrictInt = Field(ge=0, le=1_000_000)
    world_size: StrictInt = Field(ge=1, le=1_000_000)
    group_name: StrictStr = _GROUP
    backend: StrictStr = Field(default="nccl", min_length=1, max_length=64)
    rank_stride: StrictInt = Field(default=1, ge=1, le=4096)


class DestroyWeightsUpdateGroup(_Body):
    group_name: StrictStr = _GROUP


class UpdateWeightsFromDistributed(_Body):
    names: list[StrictStr] = _NAMES
    dtypes: list[StrictStr] = _NAMES
    shapes: list[list[StrictInt]] = _NAMES
    group_name: StrictStr = _GROUP
    flush_cache: StrictBool = True
    abort_all_requests: StrictBool = False
    weight_version: StrictStr | None = Field(default=None, min_length=1, max_length=256)

    @model_validator(mode="after")
    def _one_entry_per_tensor(self) -> UpdateWeightsFromDistributed:
        if not len(self.names) == len(self.dtypes) == len(self.shapes):
            raise ValueError("names, dtypes and shapes must have one entry per tensor")
        return self


class UpdateWeightsFromTensor(_Body):
    serialized_named_tensors: list[StrictStr] = Field(min_length=1, max_length=4096)
    load_format: StrictStr | None = Field(default=None, min_length=1, max_length=64)
    flush_cache: StrictBool = True
    abort_all_requests: StrictBool = False
    weight_version: StrictStr | None = Field(default=None, min_length=1, max_length=256)
