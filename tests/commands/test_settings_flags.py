"""Every ``Settings`` field is settable by its generated ``serve`` flag (through the
real parser), by ``SEEDPROXY_<NAME>`` and by a TOML key ``<name>``; the older
spellings the README documents still work. A new field without a flag fails here."""

from __future__ import annotations

import datetime
import json
import re
import types
import typing
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic.fields import FieldInfo

from seedproxy.commands.cli import build_parser
from seedproxy.commands.options import flag_values
from seedproxy.settings import ALIASES, Settings, load_settings

SPECIAL = {
    "upstream": ["http://127.0.0.1:9", "http://127.0.0.1:10"],
    "backend": "vllm",
    "host": "localhost",
}
"""Fields whose validation refuses the value derived from their type."""

FIELDS = sorted(Settings.model_fields)


@pytest.fixture(autouse=True)
def _no_seedproxy_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for key in [k for k in os.environ if k.upper().startswith("SEEDPROXY_")]:
        monkeypatch.delenv(key)


def _base(annotation: Any) -> Any:
    """``X | None`` -> ``X``; anything else unchanged."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return args[0] if len(args) == 1 else annotation
    return annotation


def _bounds(info: FieldInfo) -> tuple[float | None, float | None]:
    lo = hi = None
    for meta in info.metadata:
        for attr in ("ge", "gt"):
            if getattr(meta, attr, None) is not None:
                lo = getattr(meta, attr) + (attr == "gt")
        for attr in ("le", "lt"):
            if getattr(meta, attr, None) is not None:
                hi = getattr(meta, attr) - (attr == "lt")
    return lo, hi


def derived_value(name: str) -> Any:
    """A valid value other than the default, from the field's type and bounds."""
    info = Settings.model_fields[name]
    kind, default = _base(info.annotation), info.get_default(call_default_factory=True)
    if kind is bool:
        return default is not True
    if typing.get_origin(kind) is Literal:
        return next(v for v in typing.get_args(kind) if v != default)
    if kind in (int, float):
        lo, hi = _bounds(info)
        start = default if default is not None else (lo if lo is not None else 1)
        step = 1 if kind is int else 1.5
        for value in (start + step, start - step, lo, hi):
            if value is not None and value != default and (lo is None or value >= lo) \
                    and (hi is None or value <= hi):
                return kind(value)
    if kind is str:
        return f"value-of-{name}"
    if typing.get_origin(kind) is list:
        return [f"value-of-{name}-1", f"value-of-{name}-2"]
    if kind is datetime.date:
        return datetime.date(2031, 11, 3)
    raise AssertionError(f"no value derivable for {name}: {info.annotation}")


def value_for(name: str) -> Any:
    return SPECIAL[name] if name in SPECIAL else derived_value(name)


def as_argv(flag: str, value: Any) -> list[str]:
    if isinstance(value, bool):
        return [flag if value else "--no-" + flag.removeprefix("--")]
    if isinstance(value, list):
        return [part for item in value for part in (flag, str(item))]
    return [flag, str(value)]


def as_env(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return ",".join(value) if isinstance(value, list) else str(value)


def as_toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(as_toml(v) for v in value) + "]"
    if isinstance(value, datetime.date):
        return value.isoformat()  # a TOML local date
    return json.dumps(value) if isinstance(value, str) else repr(value)


def from_argv(argv: list[str]) -> Settings:
    args = build_parser().parse_args(["serve", *argv])
    return load_settings(flag_values(args), args.config)


def test_the_special_values_table_is_not_stale() -> None:
    for name, value in SPECIAL.items():
        assert name in Settings.model_fields, f"SPECIAL names no field {name}"
        assert value != Settings.model_fields[name].get_default(call_default_factory=True)
        with pytest.raises(ValueError):  # the derived value really is refused
            Settings(**{name: derived_value(name)})


@pytest.mark.parametrize("name", FIELDS)
def test_a_field_is_set_by_its_generated_flag(name: str) -> None:
    value = value_for(name)
    assert getattr(from_argv(as_argv("--" + name.replace("_", "-"), value)), name) == value


@pytest.mark.parametrize("name", FIELDS)
def test_a_field_is_set_by_its_environment_variable(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    value = value_for(name)
    monkeypatch.setenv("SEEDPROXY_" + name.upper(), as_env(value))
    assert getattr(load_settings({}), name) == value


@pytest.mark.parametrize("name", FIELDS)
def test_a_field_is_set_by_its_toml_key(name: str, tmp_path: Path) -> None:
    value = value_for(name)
    config = tmp_path / "seedproxy.toml"
    config.write_text(f"[seedproxy]\n{name} = {as_toml(value)}\n")
    assert getattr(load_settings({}, str(config)), name) == value
    assert getattr(from_argv(["--config", str(config)]), name) == value


@pytest.mark.parametrize(("old", "name"), sorted(ALIASES.items()))
def test_the_readmes_older_spellings_still_set_the_field(
    old: str, name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    value = value_for(name)
    assert getattr(from_argv(as_argv("--" + old.replace("_", "-"), value)), name) == value
    config = tmp_path / "seedproxy.toml"
    config.write_text(f"{old.replace('_', '-')} = {as_toml(value)}\n")
    assert getattr(load_settings({}, str(config)), name) == value
    monkeypatch.setenv("SEEDPROXY_" + old.upper(), as_env(value))
    assert getattr(load_settings({}), name) == value


def test_every_flag_has_help_and_old_spellings_stay_out_of_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--help"])
    text = capsys.readouterr().out
    for name in FIELDS:
        assert Settings.model_fields[name].description, f"{name} has no description"
        assert "--" + name.replace("_", "-") in text
    for old in ALIASES:
        flag = "--" + old.replace("_", "-")
        assert not re.search(rf"(?<![\w-]){flag}(?![\w-])", text), flag


def test_the_configuration_page_lists_every_option() -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()
    for name in FIELDS:
        assert f"`--{name.replace('_', '-')}" in page, name
        assert f"`SEEDPROXY_{name.upper()}`" in page, name
