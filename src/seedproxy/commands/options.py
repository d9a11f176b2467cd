"""``Settings``' flags, generated from its fields: the field ``name`` is the flag
``--name-with-dashes``, its docstring the help. Booleans are ``--x/--no-x``; lists
repeat; every flag defaults to None (unset: ``load_settings`` decides). Older spellings
(``ALIASES``) are hidden flags with the same destination."""

from __future__ import annotations

import argparse
import datetime
import types
import typing
from collections.abc import Collection
from typing import Any, Literal

from pydantic.fields import FieldInfo

from ..settings import ALIASES, Settings

__all__ = ["add_settings_flags", "flag_name", "flag_values"]


def flag_name(field: str) -> str:
    return "--" + field.replace("_", "-")


def add_settings_flags(parser: argparse.ArgumentParser, *,
                       exclude: Collection[str] = ()) -> None:
    """``--config`` and every field's flag but those in ``exclude``."""
    parser.add_argument("--config", help="a TOML config file")
    group = parser.add_argument_group(
        "settings", "each also SEEDPROXY_<NAME> in the environment, or <name> in --config")
    for name, info in Settings.model_fields.items():
        if name in exclude:
            continue
        group.add_argument(flag_name(name), dest=name, default=None, help=_help(info),
                           **_kind(name, info))
    for old, name in ALIASES.items():
        if name not in exclude:
            info = Settings.model_fields[name]
            group.add_argument(flag_name(old), dest=name, default=None,
                               help=argparse.SUPPRESS, **_kind(name, info))


def flag_values(args: argparse.Namespace) -> dict[str, Any]:
    return {name: getattr(args, name) for name in Settings.model_fields if hasattr(args, name)}


def _base(annotation: Any) -> Any:
    """``X | None`` -> ``X``."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def _kind(name: str, info: FieldInfo) -> dict[str, Any]:
    """argparse keywords for the field's type; ``Settings`` checks the values, so a
    ``Literal`` gets a metavar, not ``choices``."""
    kind = _base(info.annotation)
    if kind is bool:
        return {"action": argparse.BooleanOptionalAction}
    if typing.get_origin(kind) is list:
        return {"action": "append", "metavar": name.upper()}
    if typing.get_origin(kind) is Literal:
        return {"metavar": "{" + ",".join(str(v) for v in typing.get_args(kind)) + "}"}
    if kind in (int, float, str):
        return {"type": kind, "metavar": name.upper()}
    if kind is datetime.date:  # the text, which ``Settings`` parses (YYYY-MM-DD)
        return {"type": str, "metavar": "YYYY-MM-DD"}
    raise TypeError(f"Settings.{name}: no flag for type {info.annotation!r}")


def _help(info: FieldInfo) -> str:
    text = " ".join((info.description or "").split())
    default = info.get_default(call_default_factory=True)
    if default not in (None, []) and not isinstance(default, bool):
        text += f" (default {default})"
    return text.replace("%", "%%")
