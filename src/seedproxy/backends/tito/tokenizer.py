"""Loading the tokenizer that token-in-token-out mode renders and decodes with.

``transformers`` is imported lazily: it comes with the ``tito`` (or ``engine``) extra,
and the core proxy never needs it. Any failure to load is one ``ConfigError`` line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...errors import ConfigError

__all__ = ["load_tokenizer", "read_template"]

_EXTRA = "token-in-token-out mode needs transformers: pip install 'seedproxy[tito]'"


def load_tokenizer(path: str) -> Any:
    """A Hugging Face tokenizer from a model folder or a ``.gguf`` file."""
    try:
        from transformers import AutoTokenizer
    except ImportError as exc:
        raise ConfigError(f"{_EXTRA} ({exc.msg})") from None
    target = Path(path).expanduser()
    if not target.exists():
        raise ConfigError(f"tokenizer not found: {path}")
    try:
        if target.is_file():
            if target.suffix.lower() != ".gguf":
                raise ConfigError(f"--tokenizer must be a model folder or a .gguf file: {path}")
            return AutoTokenizer.from_pretrained(str(target.parent), gguf_file=target.name)
        return AutoTokenizer.from_pretrained(str(target))
    except ConfigError:
        raise
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
