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
    parser = _Parser(prog="seedproxy", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    serve = commands.add_parser("serve", help="run the proxy (with the embedded engine if no --upstream)")
    serve.add_argument("--upstream", action="append", help="an upstream's root URL; repeatable")
    serve.add_argument("--backend", choices=["sglang", "vllm", "openai"])
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.add_argument("--deterministic", action=argparse.BooleanOptionalAction, default=None)
    serve.add_argument("--admin-key")
    serve.add_argument("--store", help="memory:// | sqlite:///PATH | redis://HOST:PORT/DB")
    serve.add_argument("--model", help="engine model: a Hugging Face folder or a .gguf file")
    serve.add_argument("--workers", type=int)
    serve.add_argument("--max-body-bytes", type=int, help="larger request bodies get 413")
    serve.add_argument("--max-open-sessions", type=int, help="more open sessions get 429")
    serve.add_argument("--connect-timeout", type=float, help="seconds to connect upstream (504)")
    serve.add_argument("--read-timeout", type=float, help="seconds to wait on upstream reads (504)")
    serve.add_argument("--session-ttl", type=float, help="evict sessions idle or ended this long (s)")
    serve.add_argument("--graceful-shutdown", type=float, help="seconds to drain on SIGTERM")
    serve.add_argument("--config", help="a TOML config file")

    engine = commands.add_parser("engine", help="run the embedded CPU engine as an SGLang-compatible server")
    engine.add_argument("--host", default="127.0.0.1")
    engine.add_argument("--port", type=int, default=30000)
    engine.add_argument("--model")

    seed = commands.add_parser("seed", help="print seed(IDENTITY, INDEX)")
    seed.add_argument("identity")
    seed.add_argument("index")

    export = commands.add_parser("export", help="write trajectories to JSON Lines")
    export.add_argument("--url", required=True, help="the proxy's root URL")
    export.add_argument("--group")
    export.add_argument("--count", type=int)
    export.add_argument("--timeout", type=float, default=60.0)
    export.add_argument("--admin-key")
    export.add_argument("--out", required=True)
    return parser


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

    flags = {
        "upstream": args.upstream,
        "backend": args.backend,
        "host": args.host,
        "port": args.port,
        "deterministic": args.deterministic,
        "admin_key": args.admin_key,
        "store": args.store,
        "model": args.model,
        "workers": args.workers,
        "max_body_bytes": args.max_body_bytes,
        "max_open_sessions": args.max_open_sessions,
        "connect_timeout_s": args.connect_timeout,
        "read_timeout_s": args.read_timeout,
        "session_ttl_s": args.session_ttl,
        "graceful_shutdown_s": args.graceful_shutdown,
    }
    return serve(flags, args.config)


def _engine(args: argparse.Namespace) -> int:
    from .serve import run_engine_only

    return run_engine_only(args.host, args.port, args.model)


def _export(args: argparse.Namespace) -> int:
    from .export_cli import export_to_file

    return export_to_file(
        args.url, out=args.out, group=args.group, count=args.count,
        timeout_s=args.timeout, admin_key=args.admin_key,
    )


_COMMANDS = {"serve": _serve, "engine": _engine, "seed": _seed, "export": _export}
