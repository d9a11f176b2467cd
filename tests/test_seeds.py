import hashlib

import pytest

from seedproxy import choice_seeds, client_choice_seeds, derive_seed
from seedproxy.commands.cli import main
from seedproxy.seeds import content_key, content_seeds


@pytest.mark.parametrize(
    ("identity", "index", "expected"),
    [
        ("17:3", 0, 1152644103),
        ("17:3", 1, 817236710),
        ("17:4", 0, 1165872017),
        ("17", 0, 422241094),
    ],
)
def test_known_values_match_areal(identity: str, index: int, expected: int) -> None:
    assert derive_seed(identity, index) == expected


def test_negative_index_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="non-negative"):
        derive_seed("17:3", -1)


def test_choice_zero_keeps_the_plain_seed_and_others_hash_the_slot() -> None:
    seeds = choice_seeds("17:3", 0, 4)
    assert seeds[0] == 1152644103
    assert seeds[1:] == [derive_seed("17:3:0", i) for i in (1, 2, 3)]
    assert len(set(seeds)) == 4
    assert seeds == [1152644103, 1700040817, 1810570516, 1143252661]


def test_a_clients_own_seed_with_n_keeps_choice_zero_and_hashes_the_rest() -> None:
    # sha256("5:1"), sha256("5:2"): the seed rule with identity "5"
    assert client_choice_seeds(5, 3) == [5, 629698337, 58991464]
    assert client_choice_seeds(1234, 2) == [1234, 1468907381]
    assert client_choice_seeds(5, 1) == [5]


def test_seed_command_prints_the_seed(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["seed", "17:3", "1"]) == 0
    assert capsys.readouterr().out.strip() == "817236710"


@pytest.mark.parametrize("argv", [["seed", "17:3", "-1"], ["seed", "17:3", "x"], ["seed", "17:3"]])
def test_seed_command_rejects_bad_arguments(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        raise SystemExit(main(argv))
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("seedproxy: error:") and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_content_key_is_the_sha256_of_canonical_json_without_the_seed() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "héllo"}],
            "temperature": 0.7, "seed": 5, "stream": True}
    canonical = ('{"endpoint":"/v1/chat/completions","request":{"messages":[{"content":"héllo",'
                 '"role":"user"}],"model":"m","temperature":0.7}}')
    key = content_key("/v1/chat/completions", body)
    assert key == hashlib.sha256(canonical.encode("utf-8")).hexdigest()
    assert key == "4df0782dec2edc62a7a430f325c108c0948a9d8da3ed473de860db21c317d51a"
    reordered = {"temperature": 0.7, "model": "m",
                 "messages": [{"content": "héllo", "role": "user"}]}
    assert content_key("/v1/chat/completions", reordered) == key
    assert content_key("/v1/completions", reordered) != key
    assert content_key("/v1/chat/completions", {**reordered, "temperature": 0.8}) != key
    generate = {"text": "x", "rid": "r",
                "sampling_params": {"sampling_seed": 1, "max_new_tokens": 2}}
    assert content_key("/generate", generate) == content_key(
        "/generate", {"text": "x", "sampling_params": {"max_new_tokens": 2}})


def test_content_seeds_known_values() -> None:
    key = "4df0782dec2edc62a7a430f325c108c0948a9d8da3ed473de860db21c317d51a"
    assert content_seeds("17:3", key, 0, 1) == [350253026]
    assert content_seeds("17:3", key, 1, 2) == [616840787, 1280893602]
    by_formula = hashlib.sha256(f"17:3:{key}:0".encode()).digest()
    assert int.from_bytes(by_formula[:4], "big") & 0x7FFFFFFF == 350253026
    assert content_seeds("17:3", key, 1, 2)[1] == derive_seed(f"17:3:{key}:1", 1)
