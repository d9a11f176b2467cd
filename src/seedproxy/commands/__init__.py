"""The command line (``seedproxy ...``) and process management: starting servers,
launching SGLang, the preflight. Imports flow one way: ``commands`` may import
``proxy`` (the HTTP surface); ``proxy`` never imports ``commands``."""
