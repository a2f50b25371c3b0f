"""`load --from-parquet` against the real store and Ray: a document written to two parts loads once, and a
writer killed mid-COPY costs nothing."""

import os
import signal
import subprocess
import time
from pathlib import Path

import psycopg
import pytest

from jobs import on_ray
from jobs.chunks.ids import sha256_text
from jobs.config import JobConfig, apply_overrides
from jobs.errors import ConfigError
from jobs.load import _histories, load_from_parquet, prepare_part
from jobs.search.ranking import search_many
from jobs.store.parquet import RunOutput, read_errors, read_refused
from tests.conftest import BIN, write_config
from tests.factories import chunk_row, doc_row, unit_vector
from tests.test_ingest import cli, pace_collection, unpace_inserts, wait_for_done


def _rows(doc, texts, collection="load_src"):
    # A version's content hash is its own, as an ingest writes it: a load tells versions apart by it.
    sha = sha256_text("\n".join(texts))
    return [chunk_row(doc, i, t, unit_vector(i, 4), collection) | doc_row(doc, sha) for i, t in enumerate(texts)]


def test_a_document_in_two_parts_of_a_resumed_run_loads_once_as_its_last_version(tmp_path, store, pg_url,
                                                                                ray_address, monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", ray_address)
    out = RunOutput(tmp_path / "run", 4)
    # Parts 0 and 1 were written just before a kill (their commits never happened); the resumed run
    # processed their documents again into part 2, and a repeated row inside part 2 must count once too.
    # Part 0 is replaced whole: nothing of it loads (the kill test of a paced ingest found that crashing).
    out.write_part(_rows("d", ["d old"]))
    out.write_part(_rows("a", ["old 0", "old 1", "old 2"]) + _rows("b", ["b 0"]))
    out.write_part(_rows("a", ["new 0", "new 1"]) + _rows("a", ["new 0"]) + _rows("c", ["c 0"]) + _rows("d", ["d new"]))
    cfg = apply_overrides(JobConfig(), database_url=pg_url)
    loaded = load_from_parquet(cfg, [tmp_path / "run"], collection="load_dst")
    assert loaded["documents"] == 4 and loaded["vectors"] == 5
    assert loaded["duplicates_dropped"] == 5  # a's three rows of part 1, d's of part 0, the repeat in part 2
    coll = store.get_collection("load_dst")
    rows = store.conn.execute(f"SELECT source_path, seq, text FROM corpusmill.{coll.chunk_table} ORDER BY 1, 2").fetchall()
    assert rows == [("a.md", 0, "new 0"), ("a.md", 1, "new 1"), ("b.md", 0, "b 0"), ("c.md", 0, "c 0"),
                    ("d.md", 0, "d new")]
    assert store.status("load_dst")["documents"] == {"done": 4, "failed": 0, "pending": 0}
    # Loading it again commits nothing: every document is there as the run holds it.
    again = load_from_parquet(cfg, [tmp_path / "run"], collection="load_dst")
    assert (again["documents"], again["vectors"], again["unchanged"]) == (0, 0, 4)
    assert store.status("load_dst")["chunks"] == 5
    # Into a collection holding another version of one document, only that one is loaded: it replaces.
    store.conn.execute("UPDATE corpusmill.documents SET content_sha256 = 'older' WHERE collection = 'load_dst' "
                       "AND source_path = 'c.md'")
    store.conn.commit()
    again = load_from_parquet(cfg, [tmp_path / "run"], collection="load_dst")
    assert (again["documents"], again["vectors"], again["unchanged"]) == (1, 1, 3)
    assert store.status("load_dst")["chunks"] == 5


def _run(path: Path, deleted: list[str], *docs: tuple[str, list[str]]) -> Path:
    """A run directory of one part holding `docs` ((name, texts) each) whose run.json records `deleted`."""
    import json

    out = RunOutput(path, 4)
    out.write_part([row for name, texts in docs for row in _rows(name, texts)])
    (path / "run.json").write_text(json.dumps({"collection": "load_src", "deleted": deleted}))
    return path


def test_a_history_of_runs_reloads_in_one_job_into_the_state_it_reached_also_after_a_stopped_reload(
        tmp_path, store, pg_url, ray_address, monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", ray_address)
    history = [
        _run(tmp_path / "r1", [], ("a", ["a one"]), ("b", ["b one"]), ("c", ["c one", "c two"])),
        _run(tmp_path / "r2", ["b.md"], ("a", ["a two"]), ("d", ["d one"])),  # a updated, b deleted, d new
        _run(tmp_path / "r3", ["d.md"], ("c", ["c three"]), ("b", ["b again"])),  # c updated, d deleted, b back
    ]
    cfg = apply_overrides(JobConfig.model_validate({"sink": {"writers": 2}}), database_url=pg_url)

    def state():
        coll = store.get_collection("load_hist")
        rows = store.conn.execute(f"SELECT source_path, seq, text, embedding::text FROM corpusmill.{coll.chunk_table} "
                                  "ORDER BY 1, 2").fetchall()
        docs = store.conn.execute("SELECT source_path, status, chunk_count FROM corpusmill.documents "
                                  "WHERE collection = 'load_hist' ORDER BY 1").fetchall()
        return [r[:3] for r in rows], docs, len({r[3] for r in rows})

    # A reload that stopped after the first two runs, as a killed one leaves the collection; then the whole.
    load_from_parquet(cfg, history[:2], collection="load_hist")
    assert [r[0] for r in state()[0]] == ["a.md", "c.md", "c.md", "d.md"]
    loaded = load_from_parquet(cfg, history, collection="load_hist")
    assert loaded["runs"] == 3 and loaded["deleted"] == 1  # d, which the stopped reload had loaded
    expected = ([("a.md", 0, "a two"), ("b.md", 0, "b again"), ("c.md", 0, "c three")],
                [("a.md", "done", 1), ("b.md", "done", 1), ("c.md", "done", 1)], 1)
    assert state() == expected
    assert loaded["duplicates_dropped"] == 5  # the earlier rows of a, b, c (two), d
    # b and c loaded; a's last version is the one the stopped reload committed: not loaded again.
    assert (loaded["documents"], loaded["unchanged"]) == (2, 1)
    assert load_from_parquet(cfg, history, collection="load_hist")["deleted"] == 0  # repeated: the same state
    assert state() == expected


def test_a_version_the_database_refused_at_commit_is_left_out_and_the_one_before_stands(tmp_path):
    """A run writes a document's rows to its part before committing them; a version the database then
    refused (recorded failed, the version before kept) is in the run's errors.parquet at stage `load`."""

    history = [_run(tmp_path / "r1", [], ("a", ["a one"]), ("b", ["b one"])),
               _run(tmp_path / "r2", [], ("a", ["a two"]), ("b", ["b two"]))]
    RunOutput(tmp_path / "r2", 4).write_errors([
        {"source_path": "a.md", "stage": "load", "error_class": "DataError", "message": "refused"},
        {"source_path": "b.md", "stage": "parse_markdown", "error_class": "NotUtf8Error", "message": "an earlier stage"}])
    [h] = _histories(history, None, "load_refused")
    where = {h.paths[d]: run for d, (run, _) in h.last.items()}
    assert where == {"a.md": 0, "b.md": 1}  # a's version of the first run stands; b's failure was no commit's
    assert [len(item["skip"]) for item in h.items()] == [1, 1]  # a left out of each part, b of the first


@pytest.mark.slow
def test_a_history_reload_killed_mid_run_and_repeated_ends_as_a_clean_reload(tmp_path, store, pg_url, ray_address,
                                                                            cm_home):

    runs = []
    for r in range(12):  # each run updates "common", adds two documents, and from the sixth deletes an early one
        docs = [("common", [f"common version {r}", f"common tail {r}"]), (f"n{r}a", [f"new a {r}"]), (f"n{r}b", [f"b {r}"])]
        runs.append(_run(tmp_path / f"r{r:02d}", [f"n{r - 5}a.md"] if r >= 5 else [], *docs))
    cfg = write_config(tmp_path / "load.yaml", "load_src", [tmp_path], database__lock_wait_seconds=60)
    env = dict(os.environ, RAY_ADDRESS=ray_address, CORPUSMILL_HOME=str(cm_home), DATABASE_URL=pg_url)
    command = [str(BIN / "corpusmill"), "load", "--from-parquet", *map(str, runs), "--collection", "hist_kill",
               "--writers", "2", "--config", str(cfg)]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    paced = None
    try:
        paced = pace_collection(pg_url, "hist_kill", proc, seconds=0.5)  # each commit held: killed mid-run
        assert wait_for_done(pg_url, "hist_kill", 2, proc, timeout=300) >= 2 and proc.poll() is None
        proc.kill()
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        if paced:
            unpace_inserts(pg_url, paced)
    again = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stdout + again.stderr[-3000:]
    cfg_clean = apply_overrides(JobConfig(), database_url=pg_url)
    load_from_parquet(cfg_clean, runs, collection="hist_clean")

    def state(name):
        coll = store.get_collection(name)
        rows = store.conn.execute(f"SELECT source_path, seq, text, embedding::text FROM corpusmill.{coll.chunk_table} "
                                  "ORDER BY 1, 2").fetchall()
        docs = store.conn.execute("SELECT source_path, status, chunk_count FROM corpusmill.documents "
                                  "WHERE collection = %s ORDER BY 1", (name,)).fetchall()
        return rows, docs

    rows, docs = state("hist_kill")
    assert (rows, docs) == state("hist_clean")
    assert [r[2] for r in rows if r[0] == "common.md"] == ["common version 11", "common tail 11"]
    assert {d[0] for d in docs} == {f"n{r}{x}.md" for r in range(12) for x in "ab"} - {f"n{r}a.md" for r in range(7)} | {
        "common.md"}
    assert store.conn.execute("SELECT count(*) FROM corpusmill.staged_rows WHERE collection = 'hist_kill'").fetchone()[0] == 0


def test_a_reload_builds_the_configured_vector_index_and_searches_through_it(tmp_path, store, pg_url, ray_address,
                                                                          monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", ray_address)
    out = RunOutput(tmp_path / "run", 4)
    out.write_part(_rows("a", ["alpha one", "alpha two"]) + _rows("b", ["bravo zulu"]))
    cfg = apply_overrides(JobConfig.model_validate({"database": {"vector_index": "halfvec"}}), database_url=pg_url)
    assert load_from_parquet(cfg, [tmp_path / "run"], collection="load_half")["vectors"] == 3
    coll = store.get_collection("load_half")
    assert store.hnsw_kind(coll) == "halfvec"
    [hits] = search_many(store, coll, [unit_vector(1, 4)], 1)
    assert hits[0]["text"] == "alpha two" and hits[0]["score"] == pytest.approx(1.0)
    [hits] = search_many(store, coll, [unit_vector(0, 4)], 1, queries=["zulu"], mode="text")
    assert hits[0]["text"] == "bravo zulu"


def _writer_pids() -> list[int]:
    """Ray workers running a write task (their process title names the operator)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                title = (proc / "cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
            except OSError:
                continue
            if title.startswith("ray::") and "Write" in title:
                pids.append(int(proc.name))
    return pids


@pytest.mark.slow
def test_a_writer_killed_mid_copy_is_retried_and_every_document_lands_once(tmp_path, store, pg_url, ray_address,
                                                                            cm_home):
    out = RunOutput(tmp_path / "run", 4)
    words = "pipeline chunk vector index sentence window heading section table workbook".split()
    parts, docs_per_part, rows_per_doc = 16, 60, 20
    for p in range(parts):
        rows = []
        for d in range(docs_per_part):
            doc = f"p{p}d{d}"
            texts = [" ".join(words[(p + d + i + j) % len(words)] for j in range(200)) + f" {doc} {i}"
                     for i in range(rows_per_doc)]
            rows += _rows(doc, texts, collection="kill_src")
        out.write_part(rows)
    env = dict(os.environ, RAY_ADDRESS=ray_address, CORPUSMILL_HOME=str(cm_home), DATABASE_URL=pg_url)
    proc = subprocess.Popen([str(BIN / "corpusmill"), "load", "--from-parquet", str(tmp_path / "run"),
                             "--collection", "kill_dst", "--writers", "2"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    killed = None
    with psycopg.connect(pg_url, autocommit=True) as conn:
        deadline = time.monotonic() + 240
        while killed is None and proc.poll() is None and time.monotonic() < deadline:
            copying = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query ILIKE 'COPY%' "
                                   "AND application_name LIKE 'corpusmill load % writer %'").fetchone()[0]
            pids = _writer_pids() if copying else []
            if pids:
                os.kill(pids[0], signal.SIGKILL)
                killed = pids[0]
            time.sleep(0.02)
    stdout, stderr = proc.communicate(timeout=300)
    assert killed is not None, "no writer was caught mid-COPY"
    assert proc.returncode == 0, stdout + stderr[-3000:]
    total = parts * docs_per_part
    assert f"loaded {total} documents" in stdout
    coll = store.get_collection("kill_dst")
    n, distinct = store.conn.execute(f"SELECT count(*), count(DISTINCT chunk_id) FROM corpusmill.{coll.chunk_table}").fetchone()
    assert n == distinct == total * rows_per_doc
    assert store.status("kill_dst")["documents"] == {"done": total, "failed": 0, "pending": 0}
    assert store.conn.execute("SELECT count(*) FROM corpusmill.staged_rows WHERE collection = 'kill_dst'").fetchone()[0] == 0


def test_a_part_is_prepared_with_each_documents_rows_together_in_seq_order():
    import pyarrow as pa


    def part(rows):
        return pa.Table.from_pylist([r | {"embedding": r["embedding"].tolist()} for r in rows])

    grouped = part(_rows("a", ["a0", "a1"]) + _rows("b", ["b0"]))
    out = prepare_part(grouped, "load_src", set())
    assert out.column("text").to_pylist() == ["a0", "a1", "b0"]  # as written: no sort, no copy
    assert out.column("text").chunks[0].buffers() == grouped.column("text").chunks[0].buffers()
    # A document whose rows are apart, or out of seq order (a hand-made part), is put together.
    apart = part(_rows("a", ["a0"]) + _rows("b", ["b0"]) + [_rows("a", ["a0", "a1"])[1]])
    out = prepare_part(apart, "load_src", set())
    got = list(zip(*(out.column(c).to_pylist() for c in ("source_path", "seq", "doc_rows"))))
    a_rows, b_rows = [("a.md", 0, 2), ("a.md", 1, 2)], [("b.md", 0, 1)]
    assert got in (a_rows + b_rows, b_rows + a_rows)  # in doc_id order, whichever that is


def test_the_deletions_of_a_run_that_failed_to_start_are_in_its_run_directory(tmp_path, pg_url, monkeypatch):
    """An ingest deletes the documents gone from its input before it starts Ray; one that then fails to
    start (Ray unreachable) must still list them in its run.json, or a reload of the history of runs
    would bring them back."""
    import json


    notes, runs = tmp_path / "notes", tmp_path / "runs"
    notes.mkdir()
    for name in ("a", "b"):
        (notes / f"{name}.md").write_text(f"# Note {name}\n\nThe text of note {name}.\n")
    cfg = write_config(tmp_path / "d.yaml", "load_deleted_unstarted", [notes], output=str(runs))
    assert cli("ingest", "--config", str(cfg)).returncode == 0
    (notes / "b.md").unlink()
    (notes / "a.md").write_text("# Note a\n\nThe changed text of note a.\n")

    def unreachable(cfg, documents):
        raise ConfigError("the Ray cluster is unreachable")

    monkeypatch.setattr(on_ray, "start", unreachable)
    out = cli("ingest", "--config", str(write_config(tmp_path / "d.yaml", "load_deleted_unstarted", [notes],
                                                     output=str(runs), ray__in_process_max_documents=0)))
    assert out.returncode == 2 and "unreachable" in out.stderr, out.stdout + out.stderr
    with psycopg.connect(pg_url) as conn:  # b is gone from the collection
        assert conn.execute("SELECT count(*) FROM corpusmill.documents WHERE collection = "
                            "'load_deleted_unstarted' AND source_path = 'b.md'").fetchone()[0] == 0
    failed = [d for d in runs.iterdir() if not list((d / "chunks").glob("part-*"))]
    assert len(failed) == 1 and json.loads((failed[0] / "run.json").read_text())["deleted"] == ["b.md"]
    (history,) = _histories(sorted(runs.iterdir()), None, None)
    assert history.deleted() == ["b.md"]


def test_a_version_a_later_attempt_of_the_run_committed_is_not_left_out_of_a_reload(tmp_path, pg_url):
    """A run's first attempt has a version refused at commit (errors.parquet, stage load); the same run id
    resumed with --retry-failed commits it. The refusal leaves errors.parquet, so a reload of the history
    loads the version the run committed, not the one before it."""

    notes, runs = tmp_path / "notes", tmp_path / "runs"
    notes.mkdir()
    for i in range(3):
        (notes / f"n{i}.md").write_text(f"# Note {i}\n\nThis is note number {i}, about tides and harbours.\n")
    cfg = str(write_config(tmp_path / "r.yaml", "load_refused_retried", [notes], output=str(runs)))
    assert cli("ingest", "--config", cfg, "--run-id", "R1").returncode == 0
    (notes / "n1.md").write_text("# Note 1\n\nV2MARK the revised note, about lighthouses.\n")
    with psycopg.connect(pg_url, autocommit=True) as conn:
        table = conn.execute("SELECT chunk_table FROM corpusmill.collections WHERE name = 'load_refused_retried'"
                             ).fetchone()[0]
        conn.execute(f"ALTER TABLE corpusmill.{table} ADD CONSTRAINT no_v2 CHECK (text NOT LIKE '%V2MARK%') NOT VALID")
        out = cli("ingest", "--config", cfg, "--run-id", "R2")
        assert out.returncode == 1, out.stdout + out.stderr
        assert read_refused(runs / "R2") == {"n1.md"}
        conn.execute(f"ALTER TABLE corpusmill.{table} DROP CONSTRAINT no_v2")
    out = cli("ingest", "--config", cfg, "--run-id", "R2", "--retry-failed")
    assert out.returncode == 0, out.stdout + out.stderr
    assert read_errors(runs / "R2") == []
    (history,) = _histories([runs / "R1", runs / "R2"], None, None)
    (n1,) = [doc for doc, path in history.paths.items() if path == "n1.md"]
    assert history.last[n1][0] == 1  # the second run's version


def test_a_history_across_a_reembed_is_refused_with_how_to_load_it(tmp_path):

    before = _run(tmp_path / "r1", [], ("a", ["a one"]))
    after = RunOutput(tmp_path / "r2", 4)
    after.write_part([dict(row, embedding_model="other-model") for row in _rows("b", ["b one"])])
    with pytest.raises(ConfigError, match=r"load the runs before it, `corpusmill reembed` the collection to the later "
                                          r"model, then load the runs after it"):
        _histories([before, tmp_path / "r2"], None, "load_models")


def test_a_refusal_at_commit_stays_listed_when_a_later_attempt_fails_the_file_at_another_stage(tmp_path):
    """errors.parquet after a resumed attempt (jobs/ingest.py _run_failures): an earlier attempt's refusal
    at commit stays unless this run has committed the file since, whatever else this attempt did with it."""
    from types import SimpleNamespace

    from jobs.ingest import _Run
    from jobs.store.parquet import read_errors

    out = RunOutput(tmp_path / "R", 4)
    out.write_errors([{"source_path": "n1.md", "stage": "load", "error_class": "CheckViolation", "message": "m"},
                      {"source_path": "n2.md", "stage": "parse_markdown", "error_class": "X", "message": "m"},
                      {"source_path": "n3.md", "stage": "load", "error_class": "CheckViolation", "message": "m"}])
    committed = {"n3.md"}
    run = SimpleNamespace(output=out, storage=None, run_id="R", cfg=SimpleNamespace(collection="c"),
                          store=SimpleNamespace(committed_in_run=lambda c, paths, r: committed & set(paths)))
    now = [{"source_path": "n1.md", "stage": "parse_markdown", "error_class": "Y", "message": "edited, broken"},
           {"source_path": "n2.md", "stage": "parse_markdown", "error_class": "X", "message": "again"}]
    listed = _Run._run_failures(run, now)
    assert [(f["source_path"], f["stage"], f["message"]) for f in listed] == [
        ("n1.md", "load", "m"),  # its refused rows are still in the first attempt's part
        ("n1.md", "parse_markdown", "edited, broken"), ("n2.md", "parse_markdown", "again")]
    assert read_errors(tmp_path / "R") and "n3.md" not in {f["source_path"] for f in listed}  # committed since
