"""A skipped group (a missing system package) is named at the end of the run, with its
size and reason, not only counted in the final line."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]


@pytest.fixture
def pytester(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makeconftest("from tests.conftest import pytest_terminal_summary  # noqa: F401\n")
    return pytester


def test_the_summary_names_each_skipped_group_with_its_size(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        def test_redis_a():
            pytest.skip("redis-server is not installed")

        def test_redis_b():
            pytest.skip("redis-server is not installed")

        @pytest.mark.skipif(True, reason="chromium is not installed")
        def test_viewer():
            pass

        def test_runs():
            pass
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "-p", "no:xdist")
    result.assert_outcomes(passed=1, skipped=3)
    result.stdout.fnmatch_lines([
        "*skipped groups (not tested on this machine)*",
        "    2 skipped: redis-server is not installed",
        "    1 skipped: chromium is not installed",
        "Install what they name*",
    ])


def test_a_run_without_skips_prints_no_section(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_runs():\n    pass\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "-p", "no:xdist")
    result.assert_outcomes(passed=1)
    assert "skipped groups" not in result.stdout.str()
