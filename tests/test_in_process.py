"""Small runs in the driver process (jobs/in_process.py): the same chunks and vectors as the Ray path,
and an edit re-run that stays in process."""

from __future__ import annotations

import os

import numpy as np
import psycopg
import pytest

from tests.conftest import write_config
from tests.test_ingest import cli, status, summary_line

pytestmark = pytest.mark.slow


def stored(pg_url: str, collection: str) -> tuple[list[tuple], np.ndarray]:
    """(source_path, seq, text, embed_text) of each chunk, and its vector, in one order."""
    with psycopg.connect(pg_url) as conn:
        table = conn.execute("SELECT chunk_table FROM corpusmill.collections WHERE name = %s",
                             (collection,)).fetchone()[0]
        rows = conn.execute(f"SELECT source_path, seq, text, embed_text, embedding::text FROM corpusmill.{table} "
                            "ORDER BY source_path, seq").fetchall()
    return [r[:4] for r in rows], np.array([np.array(r[4].strip("[]").split(","), dtype=np.float32) for r in rows])


def last_stage_stats(pg_url: str, collection: str) -> dict:
    with psycopg.connect(pg_url) as conn:
        return conn.execute("SELECT stage_stats FROM corpusmill.runs WHERE collection = %s ORDER BY started_at DESC "
                            "LIMIT 1", (collection,)).fetchone()[0]


def test_a_small_run_in_process_stores_what_the_ray_path_stores(tmp_path, corpus, ray_address, pg_url, cm_home):
    base = dict(os.environ, CORPUSMILL_HOME=str(cm_home), TOKENIZERS_PARALLELISM="false")
    base.pop("RAY_ADDRESS", None)
    on_ray = write_config(tmp_path / "ray.yaml", "e2e_on_ray", [corpus])
    out = cli("ingest", "--config", str(on_ray), env=dict(base, RAY_ADDRESS=ray_address))  # a cluster: always Ray
    assert out.returncode == 0, out.stdout + out.stderr
    here = write_config(tmp_path / "here.yaml", "e2e_in_process", [corpus])
    out = cli("ingest", "--config", str(here), env=base)  # local, 7 documents ≤ ray.in_process_max_documents
    assert out.returncode == 0, out.stdout + out.stderr
    assert "run in this process" in out.stderr
    assert last_stage_stats(pg_url, "e2e_in_process")["sink"]["in_process"] is True
    assert last_stage_stats(pg_url, "e2e_on_ray")["sink"]["in_process"] is False

    ray_rows, ray_vectors = stored(pg_url, "e2e_on_ray")
    rows, vectors = stored(pg_url, "e2e_in_process")
    assert rows == ray_rows and len(rows) > 20  # Markdown and workbook chunks alike
    np.testing.assert_allclose(vectors, ray_vectors, atol=1e-4)
    assert status("e2e_in_process", env=base)["documents"] == {"done": 7, "failed": 0, "pending": 0}

    # The same corpus under a third name, with other collections' vectors allowed: nothing is computed.
    again = write_config(tmp_path / "again.yaml", "e2e_again", [corpus], embedding__reuse_other_collections=True)
    out = cli("ingest", "--config", str(again), env=base)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"(0 computed, {len(rows)} reused)" in out.stdout, out.stdout
    again_rows, again_vectors = stored(pg_url, "e2e_again")
    assert again_rows == rows
    np.testing.assert_array_equal(again_vectors, vectors)

    # An edit: one page changed, in process again; only its changed chunks are embedded.
    page = next(p for p in sorted(corpus.rglob("*.md")))
    page.write_text(page.read_text(encoding="utf-8") + "\n\nA closing paragraph added by an edit.\n",
                    encoding="utf-8")
    out = cli("ingest", "--config", str(here), env=base)
    assert out.returncode == 0, out.stdout + out.stderr
    assert summary_line(out.stdout) == "files: 0 added, 1 updated, 0 retried, 6 skipped, 0 deleted, 0 failed"
    assert "run in this process" in out.stderr
    counts = last_stage_stats(pg_url, "e2e_in_process")
    assert counts["sink"]["documents"] == 1


def test_the_in_process_path_imports_no_ray():
    """Ray's imports alone take longer than a small run's work: the ingest module and the in-process
    path load without them (jobs/on_ray.py holds what needs Ray and is imported only to use it)."""
    import subprocess
    import sys

    probe = ("import sys, jobs.ingest, jobs.in_process, jobs.store.writers; "
             "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
