"""The request pipeline: admit -> seat -> send -> read -> present.

Seating sets a frozen ``RequestContext``; each stage's output is its own object, its
only writer (``call.py``, ``recorder.py``, ``observer.py``). ``Reader`` strategies ask the
upstream (passthrough, fan-out, token-in-token-out, and the raw fast path outside
sessions), ``Presenter`` strategies answer the client (OpenAI, Responses, Messages).
Imports flow one way: ``seeds`` <- ``sessions`` <- the upstream side (``wire``,
``transport``, ``media``, ``tito``, ``dialects``, ``bridges``, ``fleet``) <- ``pipeline`` <-
``proxy`` (the HTTP surface) <- ``commands``; nothing here imports ``proxy``.

``docs/pipeline.md`` walks a streamed chat request and a token-in-token-out turn hop by
hop, with the modules each runs counted (``bench/hops.py``).
"""
