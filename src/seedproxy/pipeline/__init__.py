"""The request pipeline: admit -> seat -> send -> read -> present.

Seating sets a frozen ``RequestContext``; each stage's output is its own object, its
only writer (``call.py``, ``recorder.py``, ``observer.py``). ``Reader`` strategies ask the
upstream, ``Presenter`` strategies answer the client. Nothing here imports ``proxy``
(``tests/test_layers.py``). ``docs/pipeline.md`` walks a request hop by hop.
"""
