"""The request pipeline: admit -> seat -> send -> read -> present.

One ``Exchange`` holds a request's state and lifecycle; ``Reader`` strategies ask the
upstream (passthrough, fan-out, token-in-token-out, and the raw fast path outside
sessions), ``Presenter`` strategies answer the client (OpenAI, Responses, Messages).
Imports flow one way: ``seeds`` <- ``sessions`` <- the upstream side (``wire``,
``transport``, ``media``, ``tito``, ``dialects``, ``bridges``, ``fleet``) <- ``pipeline`` <-
``proxy`` (the HTTP surface) <- ``commands``; nothing here imports ``proxy``.

``docs/pipeline.md`` walks a streamed chat request and a token-in-token-out turn hop by
hop, with the modules each runs counted (``bench/hops.py``).
"""
