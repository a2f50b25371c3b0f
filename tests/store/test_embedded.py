"""The embedded server's settings for bulk loads (jobs/store/embedded.py): a new data directory starts
with them, an older one adopts them, and an operator's own setting stays."""

from __future__ import annotations

import psycopg

from jobs.store import embedded


def _settings(url: str) -> dict[str, tuple[str, str]]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT name, current_setting(name), source FROM pg_settings WHERE name = ANY(%s)",
                            (list(embedded.settings()),)).fetchall()
    return {name: (value, source) for name, value, source in rows}


def _alter(url: str, statement: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(statement)
        conn.execute("SELECT pg_reload_conf()")


def test_a_new_data_directory_starts_with_the_bulk_settings(pg_url):
    got = _settings(pg_url)  # the session's server: a fresh CORPUSMILL_HOME
    assert got["max_wal_size"] == ("4GB", "configuration file")
    assert got["checkpoint_timeout"] == ("15min", "configuration file")
    assert got["shared_buffers"][0] == embedded.settings()["shared_buffers"].replace("1024MB", "1GB")


def test_an_older_data_directory_adopts_them_and_an_operators_own_setting_stays(pg_url):
    with psycopg.connect(pg_url) as conn:
        conf = conn.execute("SHOW config_file").fetchone()[0]
    with open(conf) as f:
        text = f.read()
    assert "# corpusmill" in text
    try:
        # A data directory from before: the file without corpusmill's lines; an operator's own timeout.
        with open(conf, "w") as f:
            f.write(text[:text.index("\n# corpusmill")] + "\n")
        _alter(pg_url, "ALTER SYSTEM SET checkpoint_timeout = '10min'")
        assert _settings(pg_url)["max_wal_size"] == ("1GB", "configuration file")  # as initdb writes it

        embedded._adopt_settings(pg_url)
        got = _settings(pg_url)
        assert got["max_wal_size"] == ("4GB", "configuration file")
        assert got["checkpoint_timeout"] == ("10min", "configuration file")  # the operator's: left alone
        with psycopg.connect(pg_url) as conn:  # from the server's next start
            assert conn.execute("SELECT pending_restart FROM pg_settings WHERE name = 'shared_buffers'").fetchone()[0]
    finally:
        with open(conf, "w") as f:
            f.write(text)
        _alter(pg_url, "ALTER SYSTEM RESET ALL")
    assert _settings(pg_url)["max_wal_size"] == ("4GB", "configuration file")


def test_shared_buffers_take_a_sixteenth_of_memory_within_bounds():
    assert embedded.shared_buffers_mb(None) == 128
    assert embedded.shared_buffers_mb(1 * 2**30) == 128
    assert embedded.shared_buffers_mb(8 * 2**30) == 512
    assert embedded.shared_buffers_mb(256 * 2**30) == embedded.SHARED_BUFFERS_MAX_MB


def test_a_containers_memory_limit_bounds_them(tmp_path, monkeypatch):
    limit = tmp_path / "memory.max"
    limit.write_text(f"{4 * 2**30}\n")  # a 4 GiB container on a larger machine
    monkeypatch.setattr(embedded, "_CGROUP_LIMITS", (tmp_path / "absent", limit))
    assert embedded.memory_bytes() == 4 * 2**30
    assert embedded.settings()["shared_buffers"] == "256MB"
    limit.write_text("max\n")  # no limit: the machine's memory
    assert embedded.memory_bytes() > 0
