"""Configuration: flags > ``SEEDPROXY_*`` environment > TOML config file > defaults."""

from __future__ import annotations

import ipaddress
import os
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from .errors import ConfigError

__all__ = ["Settings", "is_loopback", "load_settings"]


class Settings(BaseSettings):
    """Everything ``seedproxy serve`` needs. Immutable once built."""

    model_config = SettingsConfigDict(env_prefix="SEEDPROXY_", frozen=True, extra="forbid")

    upstream: Annotated[list[str], NoDecode] = Field(default_factory=list)
    backend: str = "sglang"
    """A name in ``backends.BACKENDS``."""
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    deterministic: bool = True
    admin_key: str | None = None
    store: str = "memory://"
    model: str | None = None
    engine_max_batch: int = Field(default=8, ge=1, le=64)
    """Sequences the embedded engine decodes together (one forward call per step)."""
    engine_prefix_cache_mb: int = Field(default=512, ge=0)
    """Memory for finished sequences' KV prefixes kept by the embedded engine (LRU)."""
    workers: int = Field(default=1, ge=1)
    seed: int | None = None
    """A default seed for requests that bring none; refused with groups or n > 1."""
    upstream_api_key: str | None = None
    max_body_bytes: int = Field(default=32 * 1024 * 1024, ge=1024)
    max_open_sessions: int | None = Field(default=None, ge=1)
    max_upstream_body_bytes: int = Field(default=64 * 1024 * 1024, ge=1024)
    """Bounds a non-streamed upstream answer and each event of a streamed one (502)."""
    connect_timeout_s: float = Field(default=5.0, gt=0)
    read_timeout_s: float = Field(default=600.0, gt=0)
    max_failover: int = Field(default=2, ge=0)
    health_interval_s: float = Field(default=5.0, gt=0)
    session_ttl_s: float | None = Field(default=None, gt=0)
    """Evict sessions idle (or ended) this long; un-exported ones are logged as lost."""
    graceful_shutdown_s: float = Field(default=30.0, ge=0)
    client_timeout_s: float = Field(default=30.0, gt=0)
    """A client's time to send a request head, and then again its body; past it the
    connection is closed: connections that never finish cannot pile up."""
    log_requests: bool = True
    pause_timeout_s: float = Field(default=300.0, gt=0)
    """How long a request waits while the fleet is paused before its 503."""
    allow_nondeterministic_upstream: bool = False
    """Serve through upstreams that fail the determinism preflight (warn only)."""
    capture_routed_experts: bool = False
    """Ask SGLang's /generate for MoE routing (R3) and record it."""
    token_in_token_out: bool | None = None
    """Render chat templates here and send token ids upstream (None: on exactly when
    the embedded engine serves)."""
    tokenizer: str | None = None
    """Token-in-token-out: a model folder or .gguf holding the tokenizer."""
    chat_template: str | None = None
    """Token-in-token-out: a Jinja chat template file overriding the tokenizer's."""
    tool_parser: str | None = None
    reasoning_parser: str | None = None
    index_by: Literal["arrival", "content"] = "arrival"
    """How sessions derive seeds by default: by arrival index, or by content key."""

    @field_validator("upstream", mode="before")
    @classmethod
    def _split_upstreams(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [u.strip() for u in value.split(",") if u.strip()]
        return value

    @field_validator("backend")
    @classmethod
    def _check_backend(cls, value: str) -> str:
        from .backends import BACKENDS  # the registry is the one list of names

        if value not in BACKENDS:
            names = ", ".join(sorted(BACKENDS))
            raise ValueError(f"unknown backend {value!r}; choose one of {names}")
        return value

    @field_validator("upstream")
    @classmethod
    def _check_urls(cls, value: list[str]) -> list[str]:
        for url in value:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"upstream {url!r} must start with http:// or https://")
        return [url.rstrip("/") for url in value]

    @field_validator("admin_key")
    @classmethod
    def _check_admin_key(cls, value: str | None) -> str | None:
        # An HTTP header cannot carry surrounding whitespace, so such a key could never
        # be presented; an empty one would lock every route.
        if value is not None and (not value.strip() or value != value.strip()):
            raise ValueError("must not be empty, blank or padded with whitespace")
        return value

    @model_validator(mode="after")
    def _check_safety(self) -> Settings:
        if not is_loopback(self.host) and not self.admin_key:
            raise ValueError(
                f"refusing to bind {self.host} without an admin key: "
                "set --admin-key (or SEEDPROXY_ADMIN_KEY), or bind 127.0.0.1"
            )
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


_ALIASES = {
    "session_ttl": "session_ttl_s",
    "connect_timeout": "connect_timeout_s",
    "read_timeout": "read_timeout_s",
    "graceful_shutdown": "graceful_shutdown_s",
    "client_timeout": "client_timeout_s",
    "pause_timeout": "pause_timeout_s",
}
"""Option names as the flags spell them (``--session-ttl``), for env and file too."""


def load_settings(flags: dict[str, Any], config_file: str | None = None) -> Settings:
    """Build settings from explicit flags over the environment over a TOML file.

    Raises ``ConfigError`` with one readable line for any invalid value.
    """
    file_values = _read_toml(config_file) if config_file else {}
    explicit = {k: v for k, v in flags.items() if v is not None}
    try:
        return _from_env_over_file(file_values, explicit)
    except ValidationError as exc:
        raise ConfigError(_first_error(exc)) from None


def _from_env_over_file(file_values: dict[str, Any], explicit: dict[str, Any]) -> Settings:
    # pydantic-settings ranks init kwargs over env; the file must rank below env,
    # so file values are passed only for keys the environment does not set.
    prefix = "SEEDPROXY_"
    env = {k[len(prefix) :].lower(): v for k, v in os.environ.items() if k.startswith(prefix)}
    env_keys = {_ALIASES.get(k, k) for k in env}
    values = {_ALIASES.get(k, k): v for k, v in file_values.items()}
    values = {k: v for k, v in values.items() if k not in env_keys}
    # Aliased env names (SEEDPROXY_SESSION_TTL) are passed on like init values, since
    # pydantic-settings only reads the field's own name from the environment.
    for alias, name in _ALIASES.items():
        if alias in env and name not in env:
            values[name] = env[alias]
    values.update(explicit)
    return Settings(**values)


def _read_toml(path: str) -> dict[str, Any]:
    try:
        data = tomllib.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(f"config file {path} not found") from None
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"config file {path}: {exc}") from None
    section = data.get("seedproxy", data)
    if not isinstance(section, dict):
        raise ConfigError(f"config file {path}: [seedproxy] must be a table")
    return {k.replace("-", "_"): v for k, v in section.items()}


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err.get("loc", ())) or "settings"
    message = str(err.get("msg", "invalid value")).removeprefix("Value error, ")
    return f"{where}: {message}" if where != "settings" else message
