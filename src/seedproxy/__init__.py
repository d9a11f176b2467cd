"""seedproxy: an OpenAI-compatible proxy that makes LLM rollouts reproducible to the token.

Layers, imported one way only (``tests/test_layers.py`` enforces them): ``seeds`` (pure)
and the shared leaf modules (``errors``, ``settings`` ...) <- ``sessions`` (state) <- the
upstream side: ``wire`` (endpoints, requests and answer shapes), ``transport`` (the HTTP
seam), ``media`` (the image gate), ``tito`` (token-in-token-out), ``dialects`` (one class
per upstream kind), ``bridges`` (Responses and Messages to chat), ``fleet`` (the pool and
its control plane) <- ``pipeline`` (one
request's stages) <- ``proxy`` (the HTTP surface) <- ``commands`` (the command line).
``engine`` is the embedded CPU model, an upstream like any other, which ``serve`` starts
only when no upstream is given; it imports only the leaf modules. ``client`` is the
Python client and imports nothing of the server but ``trajectory`` (the exported JSON).
"""

from __future__ import annotations

from .seeds import choice_seeds, client_choice_seeds, derive_seed

__all__ = ["__version__", "choice_seeds", "client_choice_seeds", "derive_seed"]

__version__ = "0.1.0"
