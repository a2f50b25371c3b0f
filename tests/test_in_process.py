"""Small runs in the driver process (jobs/in_process.py): the same chunks and vectors as the Ray path.
An edit re-run that stays in process: test_incremental_changes_and_config_fingerprint (tests/test_ingest.py)."""

from __future__ import annotations

import numpy as np
import psycopg
import pytest

from tests.conftest import write_config
from tests.test_ingest import cli, cli_process, landed, stage_stats, status

pytestmark = pytest.mark.slow


def vectors(pg_url: str, collection: str) -> np.ndarray:
    """Each chunk's vector, in source_path, seq order."""
    with psycopg.connect(pg_url) as conn:
        table = conn.execute("SELECT chunk_table FROM corpusmill.collections WHERE name = %s",
                             (collection,)).fetchone()[0]
        rows = conn.execute(f"SELECT embedding::text FROM corpusmill.{table} ORDER BY source_path, seq").fetchall()
    return np.array([np.array(r[0].strip("[]").split(","), dtype=np.float32) for r in rows])


def test_a_small_run_in_process_stores_what_the_ray_path_stores(tmp_path, default_ingest, ray_env, pg_url):
    # The session's default ingest ran in process (7 documents, local, ≤ ray.in_process_max_documents).
    assert "run in this process" in default_ingest.out.stderr
    run_id = default_ingest.out.stdout.split("run ", 1)[1].split(" ", 1)[0]
    with psycopg.connect(pg_url) as conn:
        (stats,) = conn.execute("SELECT stage_stats FROM corpusmill.runs WHERE run_id = %s", (run_id,)).fetchone()
    assert stats["sink"]["in_process"] is True
    here_rows, here_vectors = landed(pg_url, default_ingest.collection), vectors(pg_url, default_ingest.collection)
    # The same documents joined to a cluster (RAY_ADDRESS): always Ray, the Markdown stages fused in one actor.
    on_ray = write_config(tmp_path / "ray.yaml", "e2e_on_ray", [default_ingest.corpus], ray__fuse_markdown=True)
    out = cli_process("ingest", "--config", str(on_ray), env=ray_env)
    assert out.returncode == 0, out.stdout + out.stderr
    stats = stage_stats(pg_url, "e2e_on_ray")
    assert stats["sink"]["in_process"] is False and stats["stages"]["sentences"].get("fused", False) is True

    assert landed(pg_url, "e2e_on_ray") == here_rows and len(here_rows[0]) > 20  # Markdown and workbook chunks
    np.testing.assert_allclose(vectors(pg_url, "e2e_on_ray"), here_vectors, atol=1e-4)
    assert status("e2e_on_ray")["documents"] == {"done": 7, "failed": 0, "pending": 0}

    # The same corpus under a third name, with other collections' vectors allowed: nothing is computed.
    again = write_config(tmp_path / "again.yaml", "e2e_again", [default_ingest.corpus],
                         embedding__reuse_other_collections=True)
    out = cli("ingest", "--config", str(again))
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"(0 computed, {len(here_rows[0])} reused)" in out.stdout, out.stdout
    assert landed(pg_url, "e2e_again") == here_rows
    # Lent by whichever collection holds the text (this one's or the Ray run's): equal to float32 rounding.
    np.testing.assert_allclose(vectors(pg_url, "e2e_again"), here_vectors, atol=1e-6)


def test_the_in_process_path_imports_no_ray():
    """Ray's imports alone take longer than a small run's work: the ingest module and the in-process
    path load without them (jobs/on_ray.py holds what needs Ray and is imported only to use it)."""
    import subprocess
    import sys

    probe = ("import sys, jobs.ingest, jobs.in_process, jobs.store.writers; "
             "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_an_ingest_with_nothing_to_do_leaves_the_text_indexes_of_a_table_it_analysed_again(tmp_path, pg_url):
    """A release with a new analyser: the next ingest analyses the table's terms again (dropping BM25's
    indexes while it does) even when no file changed, and builds the indexes again before it ends."""
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# Rolling updates\n\nA rolling update replaces pods a few at a time.\n")
    cfg = write_config(tmp_path / "u.yaml", "e2e_reanalysed", [notes])
    out = cli("ingest", "--config", str(cfg))
    assert out.returncode == 0, out.stdout + out.stderr

    def text_indexes(conn, table: str) -> list[str]:
        return sorted(d.split(" USING ")[1] for (d,) in conn.execute(
            "SELECT indexdef FROM pg_indexes WHERE schemaname = 'corpusmill' AND tablename = %s", (table,))
            if "lex" in d)

    with psycopg.connect(pg_url, autocommit=True) as conn:
        table = conn.execute("SELECT chunk_table FROM corpusmill.collections WHERE name = 'e2e_reanalysed'").fetchone()[0]
        built = text_indexes(conn, table)
        assert len(built) == 2  # GIN over the terms, HNSW over the weights
        conn.execute("UPDATE corpusmill.lexical_pivots SET terms = 0 WHERE chunk_table = %s", (table,))  # an older analyser's
    out = cli("ingest", "--config", str(cfg))
    assert out.returncode == 0, out.stdout + out.stderr
    with psycopg.connect(pg_url, autocommit=True) as conn:
        assert text_indexes(conn, table) == built
        assert conn.execute("SELECT terms FROM corpusmill.lexical_pivots WHERE chunk_table = %s", (table,)).fetchone()[0] > 0
    out = cli("search", "--collection", "e2e_reanalysed", "--mode", "text", "rolling update")
    assert out.returncode == 0 and "a.md" in out.stdout, out.stdout + out.stderr


def test_a_run_interrupted_after_its_write_is_recorded_aborted_not_running(tmp_path, pg_url, monkeypatch):
    """Ctrl-C during the index build (or the upkeep after the write): exit 130, the documents committed,
    and the run recorded aborted, not `running` for good."""
    from jobs.store.pgvector import PgStore

    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# Probes\n\nA readiness probe tells when a pod can take traffic.\n")
    cfg = write_config(tmp_path / "i.yaml", "e2e_interrupted", [notes])

    def interrupted(self, coll, db):
        raise KeyboardInterrupt

    monkeypatch.setattr(PgStore, "ensure_indexes", interrupted)
    out = cli("ingest", "--config", str(cfg))
    assert out.returncode == 130, out.stdout + out.stderr
    with psycopg.connect(pg_url) as conn:
        runs = conn.execute("SELECT status, finished_at IS NOT NULL FROM corpusmill.runs "
                            "WHERE collection = 'e2e_interrupted'").fetchall()
    assert runs == [("aborted", True)]
    assert status("e2e_interrupted")["documents"]["done"] == 1


def test_a_run_in_process_stopped_by_sigterm_is_recorded_aborted_and_exits_143(tmp_path, pg_url, monkeypatch):
    """`kill` (or a service manager's stop) of a small run, which has no Ray and so no Ray handler: it
    stops as Ctrl-C does, recorded aborted, and the process's SIGTERM handling is as it was after."""
    import os
    import signal
    import time

    from jobs.store.pgvector import PgStore

    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# Probes\n\nA liveness probe restarts a container that hangs.\n")
    cfg = write_config(tmp_path / "t.yaml", "e2e_terminated", [notes])

    def terminated(self, coll, db):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises before this ends

    monkeypatch.setattr(PgStore, "ensure_indexes", terminated)
    # As in a `corpusmill` process: no handler yet (a Ray driver started earlier in this test process
    # left its own).
    saved = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        out = cli("ingest", "--config", str(cfg))
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGTERM, saved)
    assert out.returncode == 143, out.stdout + out.stderr
    assert "stopped (SIGTERM): committed documents are kept" in out.stderr
    with psycopg.connect(pg_url) as conn:
        runs = conn.execute("SELECT status FROM corpusmill.runs WHERE collection = 'e2e_terminated'").fetchall()
    assert runs == [("aborted",)]


def test_sigterm_through_rays_handler_is_the_same_stop_and_serve_keeps_the_default(monkeypatch, capsys):
    """Ray's driver turns SIGTERM into sys.exit(15): a command that ran on Ray says it was stopped and
    exits 143 as one in process does. `serve` installs nothing: uvicorn's own shutdown ends it."""
    import signal

    from jobs import cli

    def on_ray(args):
        raise SystemExit(signal.SIGTERM)

    monkeypatch.setattr(cli, "cmd_load", on_ray)
    assert cli.main(["load", "--from-parquet", "x"]) == 143
    assert "stopped (SIGTERM): committed documents are kept" in capsys.readouterr().err
    from jobs.exit_status import terminate_as_interrupt

    saved = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        terminate_as_interrupt("serve")()
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGTERM, saved)
