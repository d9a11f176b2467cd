"""The request pipeline: admit -> seat -> send -> read -> present.

One ``Exchange`` holds a request's state and lifecycle; ``Reader`` strategies ask the
upstream (passthrough, fan-out, token-in-token-out, and the raw fast path outside
sessions), ``Presenter`` strategies answer the client (OpenAI, Responses, Messages).
Imports flow one way: ``seeds`` <- ``sessions`` <- the upstream side (``wire``,
``transport``, ``media``, ``tito``, ``dialects``, ``bridges``, ``fleet``) <- ``pipeline`` <-
``proxy`` (the HTTP surface) <- ``commands``; nothing here imports ``proxy``.

A streamed chat request in a session, hop by hop:

1. ``proxy.hot.HotRoutes.handle`` matches the route; ``proxy.access`` checks the key
   before any body byte is read.
2. ``admission.Admission.handle`` reads and checks the body (``request.py``) and
   translates or renders it (``_translate``): every 4xx so far uses no index.
3. ``seating.seat`` takes the slot and derives the seeds: an ``Exchange``.
4. ``Admission._strategies`` picks ``readers.PassthroughReader`` and
   ``presenters.OpenAIPresenter``.
5. ``admission.run`` registers the exchange in flight (``inflight.py``).
6. ``PassthroughReader.open`` -> ``Exchange.send_all`` -> ``resume.ResumingSender``
   -> ``fleet.pool.UpstreamPool.send`` (sticky server, failover before a byte).
7. ``streaming.stream_response`` builds the ``StreamResponse``, which takes the replies.
8. ``streaming._events``, the one stream loop: ``PassthroughReader.chunks`` yields
   each chunk checked (an error event raises), captured and stamped with derived ids;
   the presenter's writer encodes it.
9. ``Exchange.seal`` records the interaction just before ``[DONE]``; a failure sends
   the protocol's error event instead, and the record says its status.
10. ``Exchange.finish_stream`` closes the replies, leaves the registry, observes.
"""
