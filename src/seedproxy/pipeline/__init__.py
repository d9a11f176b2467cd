"""The request pipeline: admit -> seat -> send -> read -> present (``docs/pipeline.md``).

Seating sets a frozen ``RequestContext``; each stage's output is its own object, its
only writer (``call.py``, ``recorder.py``, ``observer.py``). ``Reader`` strategies ask the
upstream, ``Presenter`` strategies answer the client.
"""
