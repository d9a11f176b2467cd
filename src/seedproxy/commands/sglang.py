"""The SGLang launch command line for deterministic inference: an attention backend
that ``--enable-deterministic-inference`` refuses (not in ``DETERMINISTIC_ATTENTION``)
is refused here, before anything starts."""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from ..errors import ConfigError

__all__ = ["DETERMINISTIC_ATTENTION", "check_attention_backend", "render", "sglang_args"]

DETERMINISTIC_ATTENTION = ("fa3", "fa4", "flashinfer", "triton", "ascend", "intel_xpu")
_FLASHINFER_WARNING = (
    "SGLang disables the radix (prefix) cache with --attention-backend flashinfer in "
    "deterministic mode, so shared prefixes are recomputed; fa3, fa4 and triton keep it")


def check_attention_backend(backend: str | None) -> list[str]:
    """``ConfigError`` for a backend SGLang's deterministic mode refuses; else the
    warnings the choice deserves."""
    if backend is None:
        return []
    if backend not in DETERMINISTIC_ATTENTION:
        allowed = ", ".join(DETERMINISTIC_ATTENTION)
        raise ConfigError(f"attention backend {backend!r} is not supported by SGLang's "
                          f"deterministic inference; use one of {allowed} (or none, and "
                          "SGLang picks one)")
    return [_FLASHINFER_WARNING] if backend == "flashinfer" else []


def sglang_args(model_path: str, *, attention_backend: str | None = None,
                tp: int | None = None, host: str | None = None, port: int | None = None,
                extra: Sequence[str] = ()) -> list[str]:
    """The arguments after ``python -m sglang.launch_server``, in a fixed order:
    model, determinism, attention backend, tp, host, port, then ``extra`` verbatim."""
    if not model_path:
        raise ConfigError("--model-path must not be empty")
    if tp is not None and tp < 1:
        raise ConfigError(f"--tp must be at least 1, got {tp}")
    if port is not None and not 0 < port < 65536:
        raise ConfigError(f"--port must be between 1 and 65535, got {port}")
    check_attention_backend(attention_backend)
    args = ["--model-path", model_path, "--enable-deterministic-inference"]
    if attention_backend is not None:
        args += ["--attention-backend", attention_backend]
    if tp is not None:
        args += ["--tp", str(tp)]
    if host is not None:
        args += ["--host", host]
    if port is not None:
        args += ["--port", str(port)]
    return args + list(extra)


def render(args: Sequence[str], python: str = "python") -> str:
    """The shell line a user can paste: ``python -m sglang.launch_server ARGS``."""
    return shlex.join([python, "-m", "sglang.launch_server", *args])
