"""The ``seedproxy`` command line: a bad argument prints one line naming it and exits 2,
never a traceback."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Sequence
from typing import Any

from .. import __version__
from ..errors import ConfigError
from ..seeds import derive_seed
from .options import add_settings_flags, flag_values

__all__ = ["main"]

EXIT_USAGE = 2

_NOT_FOR_LAUNCH = frozenset(
    {"upstream", "backend", "model", "engine_max_batch", "engine_prefix_cache_mb"})
"""Settings ``launch`` decides itself (its SGLang servers) or has no use for (the engine)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # one line, exit 2
        self.exit(EXIT_USAGE, f"seedproxy: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="seedproxy",
        description="An OpenAI-compatible proxy that makes LLM rollouts reproducible to the token.",
    )
    parser.add_argument("--version", action="version", version=f"seedproxy {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    _add_server_commands(commands)
    _add_client_commands(commands)
    return parser


def _add_server_commands(commands: argparse._SubParsersAction[_Parser]) -> None:
    serve = commands.add_parser(
        "serve", help="run the proxy (with the embedded engine if no --upstream)")
    add_settings_flags(serve)
    sglang = commands.add_parser(
        "sglang-command", help="print the SGLang command line for deterministic inference")
    _add_sglang_options(sglang)
    sglang.add_argument("--port", type=int)
    launch = commands.add_parser(
        "launch", help="start a deterministic SGLang server per GPU (or TP group), then the proxy")
    _add_sglang_options(launch)
    launch.add_argument("--gpus", required=True, help="comma-separated GPU ids, e.g. 0,1,2,3")
    launch.add_argument("--base-port", type=int, default=30000,
                        help="first SGLang port (0: free ports)")
    launch.add_argument("--health-timeout", type=float, default=1800.0,
                        help="seconds to wait for /health")
    launch.add_argument("--python", default=sys.executable,
                        help="a Python that has sglang installed")
    add_settings_flags(launch, exclude=_NOT_FOR_LAUNCH)
    engine = commands.add_parser(
        "engine", help="run the embedded CPU engine as an SGLang-compatible server")
    engine.add_argument("--host", default="127.0.0.1")
    engine.add_argument("--port", type=int, default=30000)
    engine.add_argument("--model")
    # ``engine`` runs without ``Settings``; it takes ``serve``'s spellings too.
    engine.add_argument("--engine-max-batch", "--max-batch", dest="max_batch", type=int,
                        help="engine: sequences decoded together (default 8)")
    engine.add_argument("--engine-prefix-cache-mb", "--prefix-cache-mb", dest="prefix_cache_mb",
                        type=int, help="engine: MB of cached KV prefixes (default 512)")


def _add_client_commands(commands: argparse._SubParsersAction[_Parser]) -> None:
    doctor = commands.add_parser(
        "doctor", help="check that SGLang upstreams are set up for deterministic inference")
    doctor.add_argument("--upstream", action="append", required=True, help="repeatable")
    verify = commands.add_parser(
        "verify", help="re-send a session's interactions and compare tokens and logprobs")
    _add_session_options(verify)
    seed = commands.add_parser("seed", help="print seed(IDENTITY, INDEX)")
    seed.add_argument("identity")
    seed.add_argument("index")
    export = commands.add_parser("export", help="write trajectories to JSON Lines")
    export.add_argument("--url", required=True, help="the proxy's root URL")
    export.add_argument("--group")
    export.add_argument("--count", type=int,
                        help="wait for N ended sessions; fewer by --timeout: written, exit 1")
    export.add_argument("--timeout", type=float, default=60.0, help="seconds to wait (60)")
    export.add_argument("--admin-key")
    export.add_argument("--style", choices=["individual", "concat"], default="individual",
                        help="individual (default): one trajectory per line with its "
                        "interactions; concat: one token sequence with a loss mask")
    export.add_argument("--visibility-timeout", type=float,
                        help="seconds the batch stays leased without an ack (server: 300)")
    export.add_argument("--skip-abandoned", action="store_true",
                        help="leave out sessions ended as abandoned (taken out all the same)")
    export.add_argument("--out", required=True)
    logprobs = commands.add_parser(
        "verify-logprobs", help="teacher-force a session through an engine; compare logprobs")
    _add_session_options(logprobs)
    logprobs.add_argument("--engine", help="an SGLang or seedproxy engine root URL "
                          "(default: the proxy's embedded engine, as GET /fleet names it)")
    logprobs.add_argument("--tolerance", type=float, default=0.0)


def _add_session_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", required=True, help="the proxy's root URL")
    parser.add_argument("--session", required=True)
    parser.add_argument("--admin-key")


def _add_sglang_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model-path", required=True)
    parser.add_argument("--attention-backend")
    parser.add_argument("--tp", type=int)
    parser.add_argument("extra", nargs="*", metavar="-- EXTRA", help="passed to SGLang verbatim")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    if not (sys.argv[1:] if argv is None else argv):
        print(parser.format_usage().rstrip(), file=sys.stderr)
        print("seedproxy: error: a command is needed (`seedproxy serve` starts the proxy; "
              "`seedproxy --help` lists them all)", file=sys.stderr)
        return EXIT_USAGE
    args = parser.parse_args(argv)
    try:
        return _run(args)
    except ConfigError as exc:
        print(f"seedproxy: error: {exc.message}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130


def _run(args: argparse.Namespace) -> int:
    """Each command's module is imported only when that command runs."""
    command = args.command
    if command == "serve":
        from .serve import serve

        _warn_unknown_env()
        return serve(flag_values(args), args.config)
    if command == "launch":
        return _launch(args)
    if command == "sglang-command":
        from .launch import sglang_args, sglang_command, warn_attention_backend

        print(shlex.join(sglang_command(sglang_args(
            args.model_path, attention_backend=args.attention_backend, tp=args.tp,
            port=args.port, extra=args.extra))))
        warn_attention_backend(args.attention_backend)
        return 0
    if command == "engine":
        from .serve import run_engine_only

        return run_engine_only(args.host, args.port, args.model, args.max_batch,
                               args.prefix_cache_mb)
    if command == "seed":
        try:
            print(derive_seed(args.identity, int(args.index)))
        except ValueError:
            raise ConfigError(
                f"INDEX must be a non-negative integer, got {args.index!r}") from None
        return 0
    if command == "doctor":
        from .doctor import doctor

        return doctor([url.rstrip("/") for url in args.upstream])
    if command == "export":
        from .export import export_to_file

        return export_to_file(
            args.url, out=args.out, group=args.group, count=args.count,
            timeout_s=args.timeout, admin_key=args.admin_key, style=args.style,
            visibility_timeout_s=args.visibility_timeout, skip_abandoned=args.skip_abandoned)
    from .verify import verify_logprobs, verify_session

    if command == "verify":
        return verify_session(args.url, args.session, admin_key=args.admin_key)
    return verify_logprobs(args.url, args.engine, args.session, admin_key=args.admin_key,
                           tolerance=args.tolerance)


def _warn_unknown_env() -> None:
    from ..settings import unknown_env

    for line in unknown_env(os.environ):
        print(f"seedproxy: warning: {line}", file=sys.stderr)


def _launch(args: argparse.Namespace) -> int:
    from ..settings import load_settings
    from .launch import launch, parse_gpus, plan_servers, require_sglang, warn_attention_backend
    from .serve import serve

    plan = plan_servers(
        args.model_path, parse_gpus(args.gpus), tp=args.tp or 1,
        attention_backend=args.attention_backend, base_port=args.base_port,
        extra=args.extra, python=args.python)
    warn_attention_backend(args.attention_backend)
    _warn_unknown_env()
    flags = {**flag_values(args), "backend": "sglang"}
    load_settings({**flags, "upstream": plan.urls}, args.config)  # fail before starting anything
    require_sglang(args.python)
    return launch(plan, lambda urls: serve({**flags, "upstream": urls}, args.config),
                  health_timeout_s=args.health_timeout)
