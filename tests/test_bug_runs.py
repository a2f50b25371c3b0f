"""Bugs are bugs, end to end through the CLI: a bug in a stage stops the run with exit 4 and where it was
raised, on Ray and in process, with no document recorded failed or lost for it; a bad file still fails alone."""

from __future__ import annotations

import os
import subprocess
import sys

import psycopg
import pytest

from tests.conftest import write_config
from tests.test_ingest import cli, status, summary_line

pytestmark = pytest.mark.slow

# The CLI with a bug in the chunk stage for one file. The stage function lives in __main__, so Ray ships it
# to its workers by value: the bug is in the Ray tasks as much as in the driver's process.
BUGGY_CLI = '''
import sys

import jobs.pipeline


def chunk_with_a_bug(rows, **kwargs):
    from jobs.markdown import windows

    real = windows.chunk_document

    def buggy(doc, *args, **kw):
        if doc["source_path"].endswith("poison.md"):
            raise TypeError("a bug that meets poison.md")
        return real(doc, *args, **kw)

    windows.chunk_document = buggy
    try:
        return windows.chunk_documents(rows, **kwargs)
    finally:
        windows.chunk_document = real


jobs.pipeline.chunk_documents = chunk_with_a_bug
from jobs.cli import console

sys.exit(console())
'''


def run_buggy(tmp_path, *args, env) -> subprocess.CompletedProcess:
    """The CLI with the bug, as its own process (Ray ships the buggy stage from its __main__)."""
    script = tmp_path / "buggy_cli.py"
    script.write_text(BUGGY_CLI, encoding="utf-8")
    return subprocess.run([sys.executable, str(script), *args], env=env, capture_output=True, text=True, timeout=600)


def errors_of(pg_url: str, collection: str) -> list[tuple]:
    with psycopg.connect(pg_url) as conn:
        return conn.execute("SELECT source_path, error_class FROM corpusmill.errors WHERE collection = %s "
                            "ORDER BY 1", (collection,)).fetchall()


def assert_stopped_by_the_bug(out: subprocess.CompletedProcess, cm_home) -> None:
    assert out.returncode == 4, out.stdout + out.stderr
    assert "TypeError: a bug that meets poison.md (at buggy_cli.py:" in out.stderr, out.stderr[-3000:]
    assert "this is a bug in corpusmill; the traceback is in" in out.stderr
    assert list((cm_home / "logs").glob("internal-error-*.log"))


def test_a_bug_in_a_ray_stage_stops_the_run_with_exit_4_and_loses_no_document(tmp_path, corpus, ray_address,
                                                                                pg_url, cm_home):
    env = dict(os.environ, RAY_ADDRESS=ray_address, CORPUSMILL_HOME=str(cm_home), TOKENIZERS_PARALLELISM="false")
    (corpus / "poison.md").write_text("# Poison\n\nA page our chunker has a bug for.\n", encoding="utf-8")
    cfg = write_config(tmp_path / "c.yaml", "e2e_bug_ray", [corpus])
    out = run_buggy(tmp_path, "ingest", "--config", str(cfg), env=env)
    assert_stopped_by_the_bug(out, cm_home)
    assert "internal error: InternalError:" in out.stderr and "stage chunk:" in out.stderr
    # Not `LostDocument`, not failed: the documents the bug met stay pending, and the fixed code takes them.
    assert errors_of(pg_url, "e2e_bug_ray") == []
    assert status("e2e_bug_ray")["documents"]["failed"] == 0
    out = cli("ingest", "--config", str(cfg))  # the fixed code (in process: 8 documents)
    assert out.returncode == 0, out.stdout + out.stderr
    assert status("e2e_bug_ray")["documents"] == {"done": 8, "failed": 0, "pending": 0}


def test_a_bug_in_process_stops_the_run_with_exit_4_and_a_bad_file_still_fails_alone(tmp_path, corpus, pg_url,
                                                                                      cm_home):
    env = dict(os.environ, CORPUSMILL_HOME=str(cm_home), TOKENIZERS_PARALLELISM="false")
    env.pop("RAY_ADDRESS", None)
    (corpus / "poison.md").write_text("# Poison\n\nA page our chunker has a bug for.\n", encoding="utf-8")
    (corpus / "latin1.md").write_bytes("# Caf\xe9\n\nNot UTF-8 at all.".encode("latin-1"))
    cfg = write_config(tmp_path / "c.yaml", "e2e_bug_here", [corpus])
    out = run_buggy(tmp_path, "ingest", "--config", str(cfg), env=env)
    assert "run in this process" in out.stderr
    assert_stopped_by_the_bug(out, cm_home)
    assert "internal error: TypeError:" in out.stderr
    assert set(errors_of(pg_url, "e2e_bug_here")) <= {("latin1.md", "NotUtf8Error")}  # nothing lost, nothing blamed
    # Without the bug: the bad file fails alone (exit 1), every other file lands.
    out = cli("ingest", "--config", str(cfg))
    assert out.returncode == 1, out.stdout + out.stderr
    assert "latin1.md  [parse_markdown] NotUtf8Error" in out.stdout and "1 failed" in summary_line(out.stdout)
    assert status("e2e_bug_here")["documents"] == {"done": 8, "failed": 1, "pending": 0}
    assert errors_of(pg_url, "e2e_bug_here") == [("latin1.md", "NotUtf8Error")]
