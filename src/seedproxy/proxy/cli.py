"""The ``seedproxy`` command line. Parses flags into ``Settings`` and hands off;
a bad argument prints one line naming it and exits 2, never a traceback."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from ..errors import ConfigError
from ..seeds import derive_seed

__all__ = ["main"]

EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # one line, exit 2
        self.exit(EXIT_USAGE, f"seedproxy: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="seedproxy",
        description="An OpenAI-compatible proxy that makes LLM rollouts reproducible to the token.",
    )
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    serve = commands.add_parser("serve", help="run the proxy (with the embedded engine if no --upstream)")
    serve.add_argument("--upstream", action="append", help="an upstream's root URL; repeatable")
    serve.add_argument("--backend", help="sglang (default), vllm, openai")
    _add_proxy_options(serve)
    serve.add_argument("--model", help="engine model: a Hugging Face folder or a .gguf file")
    _add_engine_options(serve)

    sglang = commands.add_parser(
        "sglang-command", help="print the SGLang command line for deterministic inference"
    )
    _add_sglang_options(sglang)
    sglang.add_argument("--port", type=int)

    launch = commands.add_parser(
        "launch", help="start a deterministic SGLang server per GPU (or TP group), then the proxy"
    )
    _add_sglang_options(launch)
    launch.add_argument("--gpus", required=True, help="comma-separated GPU ids, e.g. 0,1,2,3")
    launch.add_argument("--base-port", type=int, default=30000, help="first SGLang port (0: free ports)")
    launch.add_argument("--health-timeout", type=float, default=1800.0, help="seconds to wait for /health")
    launch.add_argument("--python", default=sys.executable, help="a Python that has sglang installed")
    _add_proxy_options(launch)

    engine = commands.add_parser("engine", help="run the embedded CPU engine as an SGLang-compatible server")
    engine.add_argument("--host", default="127.0.0.1")
    engine.add_argument("--port", type=int, default=30000)
    engine.add_argument("--model")
    _add_engine_options(engine)

    seed = commands.add_parser("seed", help="print seed(IDENTITY, INDEX)")
    seed.add_argument("identity")
    seed.add_argument("index")

    export = commands.add_parser("export", help="write trajectories to JSON Lines")
    export.add_argument("--url", required=True, help="the proxy's root URL")
    export.add_argument("--group")
    export.add_argument("--count", type=int)
    export.add_argument("--timeout", type=float, default=60.0)
    export.add_argument("--admin-key")
    export.add_argument("--style", choices=["individual", "concat"], default="individual",
                        help="one record per interaction, or one token sequence per trajectory")
    export.add_argument("--out", required=True)
    return parser


def _add_proxy_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port to bind (default 8000)")
    parser.add_argument(
        "--deterministic", action=argparse.BooleanOptionalAction, default=None,
        help="derive and send seeds (default on); --no-deterministic passes requests through",
    )
    parser.add_argument("--admin-key", help="required for a non-loopback --host")
    parser.add_argument("--store", help="memory:// | sqlite:///PATH | redis://HOST:PORT/DB")
    parser.add_argument("--workers", type=int, help="uvicorn worker processes (needs --store redis://)")
    parser.add_argument("--max-body-bytes", type=int, help="larger request bodies get 413")
    parser.add_argument("--max-open-sessions", type=int, help="more open sessions get 429")
    parser.add_argument("--connect-timeout", type=float, help="seconds to connect upstream (504)")
    parser.add_argument("--read-timeout", type=float, help="seconds to wait on upstream reads (504)")
    parser.add_argument("--session-ttl", type=float, help="evict sessions idle or ended this long (s)")
    parser.add_argument("--graceful-shutdown", type=float, help="seconds to drain on SIGTERM")
    parser.add_argument("--config", help="a TOML config file")


def _add_engine_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-batch", type=int,
                        help="engine: sequences decoded together (default 8)")
    parser.add_argument("--prefix-cache-mb", type=int,
                        help="engine: MB of cached KV prefixes (default 512)")


def _add_sglang_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model-path", required=True)
    parser.add_argument("--attention-backend")
    parser.add_argument("--tp", type=int)
    parser.add_argument("extra", nargs="*", metavar="-- EXTRA", help="passed to SGLang verbatim")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return _COMMANDS[args.command](args)
    except ConfigError as exc:
        print(f"seedproxy: error: {exc.message}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130


def _seed(args: argparse.Namespace) -> int:
    try:
        index = int(args.index)
        print(derive_seed(args.identity, index))
    except ValueError:
        raise ConfigError(f"INDEX must be a non-negative integer, got {args.index!r}") from None
    return 0


def _serve(args: argparse.Namespace) -> int:
    from .serve import serve

    flags = {"upstream": args.upstream, "backend": args.backend, "model": args.model,
             "engine_max_batch": args.max_batch,
             "engine_prefix_cache_mb": args.prefix_cache_mb}
    return serve({**flags, **_proxy_flags(args)}, args.config)


def _proxy_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The settings that ``_add_proxy_options`` adds, keyed as ``Settings`` names them."""
    return {
        "host": args.host,
        "port": args.port,
        "deterministic": args.deterministic,
        "admin_key": args.admin_key,
        "store": args.store,
        "workers": args.workers,
        "max_body_bytes": args.max_body_bytes,
        "max_open_sessions": args.max_open_sessions,
        "connect_timeout_s": args.connect_timeout,
        "read_timeout_s": args.read_timeout,
        "session_ttl_s": args.session_ttl,
        "graceful_shutdown_s": args.graceful_shutdown,
    }


def _sglang_command(args: argparse.Namespace) -> int:
    from .launch import warn_attention_backend
    from .sglang_command import render, sglang_args

    line = render(sglang_args(
        args.model_path, attention_backend=args.attention_backend, tp=args.tp,
        port=args.port, extra=args.extra,
    ))
    warn_attention_backend(args.attention_backend)
    print(line)
    return 0


def _launch(args: argparse.Namespace) -> int:
    from ..settings import load_settings
    from .launch import launch, parse_gpus, plan_servers, warn_attention_backend
    from .serve import serve

    plan = plan_servers(
        args.model_path, parse_gpus(args.gpus), tp=args.tp or 1,
        attention_backend=args.attention_backend, base_port=args.base_port,
        extra=args.extra, python=args.python,
    )
    warn_attention_backend(args.attention_backend)
    flags = {"backend": "sglang", **_proxy_flags(args)}
    load_settings({**flags, "upstream": plan.urls}, args.config)  # fail before starting anything
    return launch(
        plan, lambda urls: serve({**flags, "upstream": urls}, args.config),
        health_timeout_s=args.health_timeout,
    )


def _engine(args: argparse.Namespace) -> int:
    from .serve import run_engine_only

    return run_engine_only(args.host, args.port, args.model, args.max_batch,
                           args.prefix_cache_mb)


def _export(args: argparse.Namespace) -> int:
    from .export_cli import export_to_file

    return export_to_file(
        args.url, out=args.out, group=args.group, count=args.count,
        timeout_s=args.timeout, admin_key=args.admin_key, style=args.style,
    )


_COMMANDS = {
    "serve": _serve,
    "engine": _engine,
    "seed": _seed,
    "export": _export,
    "sglang-command": _sglang_command,
    "launch": _launch,
}
