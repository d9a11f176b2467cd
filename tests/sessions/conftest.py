"""The store fixtures (one suite, three stores), for every module here."""

from tests.sessions.test_stores import opener, store  # noqa: F401  (fixtures)
