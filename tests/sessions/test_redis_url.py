"""The Redis store's URL (``redis_url.py``): a Sentinel URL names its Sentinels, service
and database; ``wait_replicas`` and ``wait_timeout_s`` are checked before any work."""

from __future__ import annotations

import pytest

from seedproxy.errors import ConfigError
from seedproxy.sessions.store import open_store
from seedproxy.sessions.store.redis_url import parse_url


def test_a_sentinel_url_names_its_sentinels_service_database_and_password() -> None:
    options = parse_url("redis+sentinel://:s%40cret@10.0.0.1:26380,sentinel-b/rollouts/3"
                        "?prefix=x:&wait_replicas=2&wait_timeout_s=0.2")
    assert options.sentinels == (("10.0.0.1", 26380), ("sentinel-b", 26379))
    assert (options.service, options.db, options.password) == ("rollouts", 3, "s@cret")
    assert (options.prefix, options.wait_replicas, options.wait_timeout_s) == ("x:", 2, 0.2)
    plain = parse_url("redis+sentinel://h:1/svc")
    assert (plain.db, plain.password, plain.wait_replicas) == (0, None, 0)


def test_a_standalone_url_keeps_its_form_and_waits_half_its_timeout_by_default() -> None:
    options = parse_url("redis://h:6379/2?timeout_s=4&wait_replicas=1")
    assert (options.url, options.sentinels, options.wait_timeout_s) == ("redis://h:6379/2", (), 2)


@pytest.mark.parametrize(("url", "says"), [
    ("redis+sentinel://h:1", "service_name"),
    ("redis+sentinel:///svc", "service_name"),
    ("redis+sentinel://h:1/svc/db0", "a number"),
    ("redis+sentinel://h:1/svc/0/extra", "service_name"),
    ("redis+sentinel://h:x/svc", "host:port"),
    ("redis://h/0?wait_replicas=-1", "whole number"),
    ("redis://h/0?wait_replicas=1&wait_timeout_s=5", "below timeout_s"),
    ("redis://h/0?wait_replica=1", "unknown redis store option"),
])
def test_a_bad_url_is_refused_before_any_connection(url: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        open_store(url)
