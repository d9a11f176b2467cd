"""seedproxy: an OpenAI-compatible proxy that makes LLM rollouts reproducible to the token.

Layers, imported one way only: ``seeds`` (pure) <- ``sessions`` (state) <- ``backends``
(upstream dialects, protocol bridges, token-in-token-out) <- ``pipeline`` (one request's
stages) <- ``proxy`` (HTTP surface) <- ``commands`` (the command line). ``engine`` is the
embedded CPU model, an upstream like any other, which ``serve`` starts only when no
upstream is given. ``tests/test_layers.py`` enforces the order.
"""

from __future__ import annotations

from .seeds import choice_seeds, client_choice_seeds, derive_seed

__all__ = ["__version__", "choice_seeds", "client_choice_seeds", "derive_seed"]

__version__ = "0.1.0"
