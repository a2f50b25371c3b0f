"""`corpusmill` exit codes and error output, in process: a user's mistake is one line and exit 2,
a bug is exit 4 with its traceback saved under $CORPUSMILL_HOME/logs/."""

from __future__ import annotations

import pytest

from jobs import cli
from jobs.errors import ConfigError, NotFoundError, UnreachableError, UserError
from jobs.store.pgvector import CollectionBusy, CollectionMismatch, DatabaseUnavailable, UnknownCollection
from tests.conftest import REPO


@pytest.fixture()
def home(tmp_path, monkeypatch):
    path = tmp_path / "home"
    monkeypatch.setenv("CORPUSMILL_HOME", str(path))
    return path


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def test_missing_config_is_a_usage_error(home, tmp_path, capsys):
    missing = tmp_path / "nope.yaml"
    assert cli.main(["stats", "--config", str(missing)]) == 2
    err = capsys.readouterr().err
    assert one_line(err) == f"corpusmill stats: error: config file not found: {missing}"
    assert not (home / "logs").exists()


def test_verbose_usage_error_prints_the_traceback(home, tmp_path, capsys):
    assert cli.main(["-v", "stats", "--config", str(tmp_path / "nope.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("corpusmill stats: error: config file not found")
    assert "Traceback (most recent call last)" in err and "NotFoundError" in err


def test_invalid_config_is_one_line_without_its_values(home, tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("chunking:\n  max_tokens: -3\ndatabase:\n  url: postgresql://u:hunter2@db/x\n  bogus: 1\n")
    assert cli.main(["stats", "--config", str(cfg)]) == 2
    line = one_line(capsys.readouterr().err)
    assert line.startswith("corpusmill stats: error: invalid configuration: ")
    assert "chunking.max_tokens" in line and "database.bogus: Extra inputs are not permitted" in line
    assert "hunter2" not in line


def test_config_that_is_not_yaml(home, tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("chunking: [1\n")
    assert cli.main(["stats", "--config", str(cfg)]) == 2
    assert f"{cfg}: not valid YAML" in one_line(capsys.readouterr().err)


def test_unreachable_database_is_a_usage_error(home, capsys):
    assert cli.main(["status", "--config", str(REPO / "configs" / "local.yaml"),
                     "--database-url", "postgresql://nobody@127.0.0.1:1/none?connect_timeout=5"]) == 2
    line = one_line(capsys.readouterr().err)
    assert line.startswith("corpusmill status: error: cannot connect to PostgreSQL")


def test_unknown_collection(pg_url, capsys):
    assert cli.main(["status", "--collection", "nosuch", "--config", str(REPO / "configs" / "local.yaml"),
                     "--database-url", pg_url]) == 2
    assert one_line(capsys.readouterr().err) == "corpusmill status: error: no collection named 'nosuch'"


def test_internal_error_exits_4_and_saves_the_traceback(home, monkeypatch, capsys):
    def broken(args):
        raise RuntimeError("boom")

    monkeypatch.setattr(cli, "cmd_status", broken)
    rc = cli.main(["status", "--database-url", "postgresql://u:hunter2@localhost/db"])
    assert rc == 4
    err = capsys.readouterr().err
    first, second = err.strip().splitlines()
    assert first == "corpusmill status: internal error: RuntimeError: boom"
    logs = sorted((home / "logs").glob("internal-error-*.log"))
    assert len(logs) == 1 and str(logs[0]) in second and "Traceback" not in err
    text = logs[0].read_text()
    assert "Traceback (most recent call last)" in text and "RuntimeError: boom" in text and "in broken" in text
    assert "--database-url '***'" in text or "--database-url ***" in text
    assert "hunter2" not in text


def test_verbose_internal_error_prints_the_traceback_too(home, monkeypatch, capsys):
    monkeypatch.setattr(cli, "cmd_stats", lambda args: {}["missing"])
    assert cli.main(["-v", "stats"]) == 4
    err = capsys.readouterr().err
    assert err.startswith("corpusmill stats: internal error: KeyError: 'missing'\n")
    assert "Traceback (most recent call last)" in err
    assert len(list((home / "logs").glob("internal-error-*.log"))) == 1


def test_interrupt_exits_130(home, monkeypatch, capsys):
    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "cmd_stats", interrupted)
    assert cli.main(["stats"]) == 130
    assert "interrupted" in capsys.readouterr().err


@pytest.mark.parametrize("cls, base", [
    (ConfigError, ValueError), (NotFoundError, FileNotFoundError), (UnreachableError, ConnectionError),
    (CollectionMismatch, ValueError), (UnknownCollection, LookupError), (DatabaseUnavailable, ConnectionError),
    (CollectionBusy, RuntimeError),
])
def test_user_errors_keep_their_builtin_base(cls, base):
    assert issubclass(cls, UserError) and issubclass(cls, base)
    assert str(cls("a message")) == "a message"


def test_an_output_directory_that_cannot_be_written_is_a_one_line_error(monkeypatch, capsys):
    import errno

    import jobs.cli as cli

    def full_disk(args):
        raise OSError(errno.ENOSPC, "No space left on device", "/mnt/runs/part-00001.parquet")

    monkeypatch.setattr(cli, "cmd_status", full_disk)
    assert cli.main(["status"]) == 2
    assert capsys.readouterr().err.strip() == ("corpusmill status: error: No space left on device: "
                                               "/mnt/runs/part-00001.parquet")


def test_status_reaches_the_database_without_importing_the_pipeline(pg_url):
    import subprocess
    import sys

    # A fresh process: which modules `corpusmill status` pulled in, not what this test session holds.
    probe = ("import sys; from jobs.cli import main; code = main(['status', '--database-url', sys.argv[1]]); "
             "heavy = [m for m in ('ray', 'torch', 'spacy', 'matplotlib', 'sentence_transformers', 'jobs.ingest') "
             "if m in sys.modules]; print('HEAVY', heavy); sys.exit(code)")
    out = subprocess.run([sys.executable, "-c", probe, pg_url], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "HEAVY []" in out.stdout
