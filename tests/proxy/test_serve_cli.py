"""``seedproxy serve`` refuses unsafe or bad settings with one line and exit 2; the
limit flags read from flags, ``SEEDPROXY_*`` and the config file."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from seedproxy import __version__
from seedproxy.commands.cli import main
from seedproxy.settings import load_settings
from tests.helpers.procs import start_seedproxy


def test_serve_on_a_public_host_without_an_admin_key_refuses_with_one_line() -> None:
    proc = start_seedproxy(
        "serve", "--host", "0.0.0.0", "--upstream", "http://127.0.0.1:9",
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    lines = err.decode().strip().splitlines()
    assert len(lines) == 1 and "admin key" in lines[0] and "0.0.0.0" in lines[0]
    assert out == b""


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--store", "mongodb://x"], "unsupported store URL"),
        (["--store", "sqlite:///"], "sqlite URL needs a path"),
        (["--store", "sqlite:////nonexistent-dir/x/y.db"], "cannot open SQLite store"),
        (["--store", "sqlite:///nonexistent-dir/y.db"],
         f"store {os.getcwd()}/nonexistent-dir/y.db (a relative path; an absolute one is "
         f"sqlite:///{os.getcwd()}/nonexistent-dir/y.db)"),
        (["--session-ttl", "0"], "session_ttl_s"),
        (["--max-body-bytes", "10"], "max_body_bytes"),
        (["--max-upstream-body-bytes", "10"], "max_upstream_body_bytes"),
        (["--read-timeout", "-1"], "read_timeout_s"),
        (["--read-timeout-s", "-1"], "read_timeout_s"),
        (["--engine-max-batch", "65"], "engine_max_batch"),
        (["--max-batch", "0"], "engine_max_batch"),
        (["--prefix-cache-mb", "-1"], "engine_prefix_cache_mb"),
        (["--upstream", "http://127.0.0.1:9/v1/"], "pass the server's root URL"),
    ],
)
def test_bad_serve_flags_are_one_line_and_exit_2(
    argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", "--upstream", "http://127.0.0.1:9", "--port", "0", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err


def test_an_unsupported_proxy_variable_is_one_line_and_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "socks5://127.0.0.1:1080")
    monkeypatch.delenv("https_proxy", raising=False)
    assert main(["serve", "--upstream", "https://127.0.0.1:9", "--port", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "only http:// forward proxies" in err[0], err


def test_limit_options_rank_flags_over_env_over_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "seedproxy.toml"
    config.write_text(
        "[seedproxy]\nsession-ttl = 11\nread-timeout = 12\nconnect_timeout_s = 13\n"
        "max-open-sessions = 14\nmax-body-bytes = 15000\n"
    )
    from_file = load_settings({}, str(config))
    assert (from_file.session_ttl_s, from_file.read_timeout_s, from_file.connect_timeout_s) == (
        11,
        12,
        13,
    )
    assert (from_file.max_open_sessions, from_file.max_body_bytes) == (14, 15000)
    monkeypatch.setenv("SEEDPROXY_SESSION_TTL", "21")
    monkeypatch.setenv("SEEDPROXY_READ_TIMEOUT_S", "22")
    monkeypatch.setenv("SEEDPROXY_MAX_OPEN_SESSIONS", "24")
    from_env = load_settings({}, str(config))
    assert (from_env.session_ttl_s, from_env.read_timeout_s, from_env.max_open_sessions) == (
        21,
        22,
        24,
    )
    assert from_env.connect_timeout_s == 13
    flagged = load_settings({"session_ttl_s": 31, "max_open_sessions": 34}, str(config))
    assert (flagged.session_ttl_s, flagged.max_open_sessions) == (31, 34)



def test_version_and_a_bare_command_line() -> None:
    version = start_seedproxy("--version", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, _ = version.communicate(timeout=60)
    assert version.returncode == 0 and out.decode().strip() == f"seedproxy {__version__}"
    bare = start_seedproxy(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = bare.communicate(timeout=60)
    lines = err.decode().strip().splitlines()
    assert bare.returncode == 2 and out == b""
    assert lines[0].startswith("usage: seedproxy") and "seedproxy serve" in lines[-1]
    assert "Traceback" not in err.decode()


def test_export_help_describes_the_default_style(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["export", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "individual (default): one trajectory per line with its interactions" in text


def test_index_by_reads_from_flag_env_and_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "seedproxy.toml"
    config.write_text('index-by = "content"\n')
    assert load_settings({}, None).index_by == "arrival"
    assert load_settings({}, str(config)).index_by == "content"
    monkeypatch.setenv("SEEDPROXY_INDEX_BY", "arrival")
    assert load_settings({}, str(config)).index_by == "arrival"
    assert load_settings({"index_by": "content"}, str(config)).index_by == "content"
    assert main(["serve", "--upstream", "http://127.0.0.1:9", "--port", "0",
                 "--index-by", "order"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "index_by" in err[0], err


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port another socket listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--upstream", "http://127.0.0.1:9", "--store", "mongodb://x"], "unsupported store URL"),
        (["--upstream", "http://127.0.0.1:9", "--store", "sqlite:////nonexistent-dir/x/y.db"],
         "cannot open SQLite store"),
        (["--upstream", "http://127.0.0.1:9", "--session-ttl-s", "0"], "session_ttl_s"),
        (["--upstream", "http://127.0.0.1:9", "--workers", "2"],
         "--workers 2 needs a shared store"),
        (["--upstream", "http://127.0.0.1:9", "--token-in-token-out",
          "--tokenizer", "/nope/tok"], "tokenizer not found"),
        (["--model", "/nope/model.gguf"], "model path not found"),
    ],
)
def test_a_bad_flag_on_a_busy_port_names_the_flag_not_the_port(
    argv: list[str], needle: str, busy_port: int, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", "--port", str(busy_port), *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0] and "cannot listen" not in err[0], err


def test_good_settings_on_a_busy_port_name_the_port(
    busy_port: int, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", "--upstream", "http://127.0.0.1:9", "--port", str(busy_port)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"cannot listen on 127.0.0.1:{busy_port}" in err[0], err


def test_the_socket_accepts_connections_as_soon_as_serve_says_it_listens() -> None:
    """``serve`` logs "listening" before uvicorn starts (the engine may still be
    loading): a client that connects at once must wait in the backlog, not be refused."""
    from seedproxy.commands.serve import bind

    sock = bind("127.0.0.1", 0)
    try:
        with socket.create_connection(sock.getsockname(), timeout=5):
            pass  # accepted into the backlog; nothing serves it yet
    finally:
        sock.close()
