"""Loading the tokenizer that token-in-token-out mode renders and decodes with.

``transformers`` is imported lazily: it comes with the ``tito`` (or ``engine``) extra,
and the core proxy never needs it. Reading a tokenizer out of a ``.gguf`` file also
needs torch (transformers dequantises through it), which only the ``engine`` extra
brings. Any failure to load is one ``ConfigError`` line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import ConfigError

__all__ = ["generation_eos_ids", "load_tokenizer", "read_template"]

_EXTRA = "token-in-token-out mode needs transformers: pip install -e '.[tito]'"
_GGUF_EXTRA = ("a .gguf tokenizer needs torch, which the engine extra brings: "
               "pip install -e '.[engine]' (or pass the model's folder)")
_CONFIG_BYTES = 1 << 20


def load_tokenizer(path: str) -> Any:
    """A Hugging Face tokenizer from a model folder or a ``.gguf`` file."""
    target = Path(path).expanduser()
    if target.is_file() and target.suffix.lower() == ".gguf":
        try:
            import torch  # noqa: F401
        except ImportError:
            raise ConfigError(_GGUF_EXTRA) from None
    try:
        from transformers import AutoTokenizer
    except ImportError as exc:
        raise ConfigError(f"{_EXTRA} ({exc.msg})") from None
    if not target.exists():
        raise ConfigError(f"tokenizer not found: {path}")
    if target.is_file() and target.suffix.lower() != ".gguf":
        raise ConfigError(f"--tokenizer must be a model folder or a .gguf file: {path}")
    try:
        if target.is_file():
            return AutoTokenizer.from_pretrained(str(target.parent), gguf_file=target.name)
        return AutoTokenizer.from_pretrained(str(target))
    except Exception as exc:  # transformers raises many kinds; all mean "not loadable"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"cannot load a tokenizer from {path}: {first}") from None


def read_template(path: str) -> str:
    """The text of a Jinja chat template file."""
    try:
        text = Path(path).expanduser().read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read chat template {path}: {exc}") from None
    if not text.strip():
        raise ConfigError(f"chat template {path} is empty")
    return text


def generation_eos_ids(path: str) -> tuple[int, ...]:
    """The end ids a model folder declares (``generation_config.json``, else
    ``config.json``: ``eos_token_id``, an int or a list), as SGLang stops on them;
    none for a ``.gguf`` file or a folder without them."""
    folder = Path(path).expanduser()
    for name in ("generation_config.json", "config.json"):
        file = folder / name
        if not folder.is_dir() or not file.is_file() or file.stat().st_size > _CONFIG_BYTES:
            continue
        try:
            value = json.loads(file.read_text(encoding="utf-8")).get("eos_token_id")
        except (OSError, UnicodeDecodeError, ValueError, AttributeError):
            raise ConfigError(f"cannot read {file}: not a JSON object") from None
        ids = value if isinstance(value, list) else [value]
        if value is not None:
            if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
                raise ConfigError(f"{file}: eos_token_id must be an id or a list of ids")
            return tuple(ids)
    return ()
