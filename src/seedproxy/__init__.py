"""seedproxy: an OpenAI-compatible proxy that makes LLM rollouts reproducible to the token.

Layers, imported one way only: ``seeds`` (pure) <- ``sessions`` (state) <- ``backends``
(upstream dialects) <- ``proxy`` (HTTP surface and CLI). ``engine`` is the embedded
CPU model, which ``proxy`` starts only when no upstream is given.
"""

from __future__ import annotations

from .seeds import choice_seeds, client_choice_seeds, derive_seed

__all__ = ["__version__", "choice_seeds", "client_choice_seeds", "derive_seed"]

__version__ = "0.1.0"
