"""A stand-in for the ``sglang`` package, for testing ``seedproxy launch``: put its
parent folder first on PYTHONPATH and ``python -m sglang.launch_server`` runs
``launch_server.py`` here."""
