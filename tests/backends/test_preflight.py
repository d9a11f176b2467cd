"""The determinism preflight names each bad SGLang setting and the flag that fixes it."""

from __future__ import annotations

from typing import Any

import pytest

from seedproxy.fleet.preflight import check_server_info
from tests.helpers.fake_control import SERVER_INFO


def test_a_deterministic_server_has_no_findings() -> None:
    assert check_server_info(SERVER_INFO) == []
    assert check_server_info({**SERVER_INFO, "attention_backend": None}) == []


@pytest.mark.parametrize(
    ("change", "problem", "fix"),
    [
        ({"enable_deterministic_inference": False}, "deterministic inference is off",
         "--enable-deterministic-inference"),
        ({"attention_backend": "torch_native"}, "'torch_native' is not deterministic",
         "--attention-backend one of"),
        ({"attention_backend": "flashinfer", "disable_radix_cache": False},
         "radix cache is on with flashinfer", "--disable-radix-cache"),
        ({"speculative_algorithm": "EAGLE"}, "speculative decoding (EAGLE)",
         "drop --speculative-algorithm"),
        ({"sampling_backend": "flashinfer"}, "sampling backend 'flashinfer'",
         "--sampling-backend pytorch"),
    ],
)
def test_each_bad_setting_is_one_finding_naming_its_fix(
    change: dict[str, Any], problem: str, fix: str
) -> None:
    findings = check_server_info({**SERVER_INFO, **change})
    assert len(findings) == 1
    assert problem in findings[0].problem and fix in findings[0].fix
    assert findings[0].line("http://gpu1:30000").startswith("http://gpu1:30000: ")


def test_flashinfer_with_the_radix_cache_off_passes() -> None:
    info = {**SERVER_INFO, "attention_backend": "flashinfer", "disable_radix_cache": True}
    assert check_server_info(info) == []


@pytest.mark.parametrize("answer", [[], "x", None, {"version": "0.5.23"}])
def test_an_answer_that_is_not_sglangs_is_a_finding(answer: Any) -> None:
    findings = check_server_info(answer)
    assert len(findings) == 1 and "did not answer as SGLang does" in findings[0].problem
