"""The configuration reference page (``docs/configuration.md``), generated from
``Settings``: one table row per field and the older spellings from ``ALIASES``.
``python -m seedproxy.commands.config_doc docs/configuration.md`` rewrites the page; a
test fails when the checked-in page differs from ``render()``."""

from __future__ import annotations

import sys
import typing
from collections.abc import Sequence
from pathlib import Path

import annotated_types
from pydantic.fields import FieldInfo

from ..settings import ALIASES, ENV_PREFIX, Settings
from .options import _base, flag_name

__all__ = ["render"]

_BOUNDS = ((annotated_types.Ge, "ge", ">="), (annotated_types.Gt, "gt", ">"),
           (annotated_types.Le, "le", "<="), (annotated_types.Lt, "lt", "<"))

INTRO = """\
<!-- Generated from seedproxy.settings.Settings by
     `python -m seedproxy.commands.config_doc docs/configuration.md`: edit the fields'
     docstrings there, not this page. -->

# Configuration

Every option of `serve` is one field of `Settings` (`src/seedproxy/settings.py`), and
its three spellings come from the field's name: the flag `--name-with-dashes`, the
environment variable `SEEDPROXY_<NAME>` (`SEEDPROXY_ADMIN_KEY`,
`SEEDPROXY_UPSTREAM=http://a:30000,http://b:30000`) and the key `name` (or
`name-with-dashes`) in a TOML file (`--config seedproxy.toml`, optionally under
`[seedproxy]`). Flags win over the environment, which wins over the file, which wins over
the defaults; a flag not given (`--x` and `--no-x` alike) leaves the choice to them. Bad
input prints one line naming the problem and exits 2 before anything binds a port (so
does a blank or whitespace-padded admin key); a bare `seedproxy` prints its usage and
exits 2; `seedproxy --version` prints the version. `launch` takes the same flags except
`--upstream`, `--backend`, `--model` and the engine's.
"""

EXAMPLE = """\
A configuration file:

```toml
upstream = ["http://gpu1:30000", "http://gpu2:30000"]
store = "sqlite:///rollouts.db"
admin_key = "change-me"
max_open_sessions = 4096
```
"""


def _flags(name: str, info: FieldInfo) -> str:
    flag = flag_name(name)
    return f"`{flag}`, `--no-{flag[2:]}`" if _base(info.annotation) is bool else f"`{flag}`"


def _default(info: FieldInfo) -> str:
    value = info.get_default(call_default_factory=True)
    if value is None or value == []:
        return ""
    return str(value).lower() if isinstance(value, bool) else str(value)


def _bounds(info: FieldInfo) -> str:
    kind = _base(info.annotation)
    if typing.get_origin(kind) is typing.Literal:
        return "one of " + ", ".join(str(v) for v in typing.get_args(kind))
    found = [f"{sign} {getattr(item, attr)}" for item in info.metadata
             for kind, attr, sign in _BOUNDS if isinstance(item, kind)]
    return ", ".join(found)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("``", "`").replace("|", "\\|")


def _legacy() -> str:
    pairs = ", ".join(f"`{flag_name(old)}` (`{flag_name(new)}`)" for old, new in ALIASES.items())
    return (
        "Older spellings still work, as flags (hidden from `--help`), as "
        f"`{ENV_PREFIX}<OLD>` and as TOML keys, each for the field in brackets: {pairs}.\n"
    )


def render() -> str:
    rows = ["| flag | environment | default | bounds | what it does |",
            "| --- | --- | --- | --- | --- |"]
    for name, info in Settings.model_fields.items():
        rows.append(f"| {_flags(name, info)} | `{ENV_PREFIX}{name.upper()}` | "
                    f"{_cell(_default(info))} | {_cell(_bounds(info))} | "
                    f"{_cell(info.description or '')} |")
    return "\n".join([INTRO, *rows, "", _legacy(), EXAMPLE]).rstrip("\n") + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args:
        Path(args[0]).write_text(render(), encoding="utf-8")
    else:
        sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
