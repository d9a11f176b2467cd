"""Pure pieces: the hash, the sampler, parameter validation, model loading errors."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.engine

torch = pytest.importorskip("torch")

from seedproxy.engine import EngineError, load_model  # noqa: E402
from seedproxy.engine.errors import RequestError  # noqa: E402
from seedproxy.engine.params import parse_sampling_params  # noqa: E402
from seedproxy.engine.sampler import Sampler, hash32  # noqa: E402


def test_hash_is_stable_and_spread() -> None:
    cols = torch.arange(1000, dtype=torch.int64)
    a, b = hash32(42, 7, cols), hash32(42, 7, cols)
    assert torch.equal(a, b)
    assert not torch.equal(a, hash32(43, 7, cols)) and not torch.equal(a, hash32(42, 8, cols))
    assert int(a.min()) >= 0 and int(a.max()) < 2**32
    assert len(set(a.tolist())) > 990


def test_gumbel_sampling_follows_distribution() -> None:
    s = Sampler(4)
    logits = torch.log(torch.tensor([0.1, 0.2, 0.3, 0.4]))
    params = parse_sampling_params({"sampling_seed": 5}, 4)
    counts = [0] * 4
    for pos in range(4000):
        counts[s.choose(logits, params, pos).token_id] += 1
    assert counts == sorted(counts) and abs(counts[3] / 4000 - 0.4) < 0.05


def test_masks() -> None:
    s = Sampler(4)
    logits = torch.log(torch.tensor([0.1, 0.2, 0.3, 0.4]))
    for sp, allowed in (({"top_k": 2}, {2, 3}), ({"top_p": 0.5}, {2, 3}),
                        ({"min_p": 0.6}, {2, 3}), ({"temperature": 0}, {3})):
        params = parse_sampling_params(sp, 4)
        assert {s.choose(logits, params, p).token_id for p in range(200)} == allowed


@pytest.mark.parametrize("sp", [{"seed": 1}, {"sampling_seed": "1"}, {"sampling_seed": True},
                                {"top_k": 0}, {"temperature": "hot"}, {"max_new_tokens": -1}])
def test_bad_params(sp: dict[str, object]) -> None:
    with pytest.raises(RequestError):
        parse_sampling_params(sp, 10)


def test_tolerated_params() -> None:
    p = parse_sampling_params({"n": 2, "skip_special_tokens": False, "frequency_penalty": 0.5,
                               "no_stop_trim": True, "spaces_between_special_tokens": True,
                               "min_new_tokens": 1, "repetition_penalty": 1.1}, 10)
    assert p.n == 2 and p.seed == 42


def test_load_model_bad_paths(tmp_path: object) -> None:
    with pytest.raises(EngineError, match="/nonexistent/model"):
        load_model("/nonexistent/model")
    with pytest.raises(EngineError, match="config.json"):
        load_model(str(tmp_path))
