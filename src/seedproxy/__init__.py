"""seedproxy: an OpenAI-compatible proxy that makes LLM rollouts reproducible to the token.

Its layers import one way only: ``tests/test_layers.py`` enforces them and
docs/development.md draws them.
"""

from __future__ import annotations

from .seeds import choice_seeds, client_choice_seeds, derive_seed

__all__ = ["__version__", "choice_seeds", "client_choice_seeds", "derive_seed"]

__version__ = "0.1.0"
