"""The determinism preflight: is an SGLang server configured to give reproducible tokens?

Pure: it reads the ``/get_server_info`` answer of SGLang 0.5.23 (its server args, flat)
and returns problems, each naming the flag that fixes it. No I/O here.

Rules (``shared/notes/domain.md``):
- ``enable_deterministic_inference`` must be true;
- an explicit ``attention_backend`` must be one deterministic mode supports;
- the radix cache must be off with ``flashinfer`` (it cannot keep prefix hits exact there);
- no speculative decoding (its draft step draws from the global RNG);
- sampling on the ``pytorch`` backend (the one deterministic mode forces).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["DETERMINISTIC_ATTENTION_BACKENDS", "Finding", "check_server_info"]

DETERMINISTIC_ATTENTION_BACKENDS = frozenset(
    {"fa3", "fa4", "flashinfer", "triton", "ascend", "intel_xpu"}
)


@dataclass(frozen=True, slots=True)
class Finding:
    """One reason a server is not deterministic, with the flag that fixes it."""

    problem: str
    fix: str

    def line(self, url: str) -> str:
        return f"{url}: {self.problem}; fix: {self.fix}"


def check_server_info(info: Any) -> list[Finding]:
    """Return what keeps the server described by ``info`` from being deterministic
    (empty when nothing does). An answer that is not SGLang's shape is one finding."""
    if not isinstance(info, Mapping) or "enable_deterministic_inference" not in info:
        return [Finding("/get_server_info did not answer as SGLang does",
                        "point --upstream at an SGLang server, or pass --backend")]
    found: list[Finding] = []
    if info.get("enable_deterministic_inference") is not True:
        found.append(Finding("deterministic inference is off",
                             "launch with --enable-deterministic-inference"))
    attention = info.get("attention_backend")
    if attention is not None and attention not in DETERMINISTIC_ATTENTION_BACKENDS:
        allowed = ", ".join(sorted(DETERMINISTIC_ATTENTION_BACKENDS))
        found.append(Finding(f"attention backend {attention!r} is not deterministic",
                             f"--attention-backend one of {allowed}"))
    if attention == "flashinfer" and info.get("disable_radix_cache") is not True:
        found.append(Finding("the radix cache is on with flashinfer",
                             "--disable-radix-cache (or --attention-backend fa3)"))
    speculative = info.get("speculative_algorithm")
    if speculative not in (None, "", "NONE"):
        found.append(Finding(f"speculative decoding ({speculative}) is on",
                             "drop --speculative-algorithm"))
    sampling = info.get("sampling_backend")
    if sampling not in (None, "pytorch"):
        found.append(Finding(f"sampling backend {sampling!r} is not deterministic",
                             "--sampling-backend pytorch"))
    return found
