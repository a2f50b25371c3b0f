"""The parallel writers against the real store and a real Ray: documents split across write tasks,
text two writers share, and a document the database rejects."""

from types import SimpleNamespace

import numpy as np
import pyarrow as pa

from jobs.rows import CHUNK_SCHEMA
from jobs.store.datasink import ChunkDatasink
from tests.factories import chunk_row, doc_row, unit_vector

# Ray is imported in the test that joins the session's Ray: it reads RAY_AUTH_MODE (set by that fixture) on import.

DIM = 4


def _rows(doc, n, collection, texts=None, **extra):
    texts = texts or [f"{doc} text {i}" for i in range(n)]
    return [chunk_row(doc, i, texts[i], unit_vector(i, DIM), collection) | doc_row(doc)
            | {"row_kind": "chunk", "doc_rows": n, "run_id": "w1"} | extra for i in range(n)]


def _table(rows) -> pa.Table:
    schema = CHUNK_SCHEMA  # what the pipeline's last stage gives the writers
    return pa.Table.from_pylist([{k: r.get(k) for k in schema.names} for r in rows], schema=schema)


def _sink(store, pg_url, collection, **kw):
    coll = store.ensure_collection(collection, "m", DIM)
    return coll, ChunkDatasink(pg_url, "corpusmill", coll, "w1", label=f"test {collection}", **kw)


def _stored(store, coll):
    return store.conn.execute(f"SELECT doc_id, seq, text FROM corpusmill.{coll.chunk_table} ORDER BY 1, 2").fetchall()


def _done(*stats):
    from ray.data.datasource.datasink import WriteResult

    return WriteResult(num_rows=0, size_bytes=0, write_returns=list(stats))


def _task(i):
    return SimpleNamespace(task_idx=i)


def test_a_document_split_across_write_tasks_is_staged_then_committed_whole(store, pg_url):
    coll, sink = _sink(store, pg_url, "ds_split")
    a, b, c = _rows("a", 3, "ds_split"), _rows("b", 1, "ds_split"), _rows("c", 2, "ds_split")
    # Task 0 gets b whole and the first rows of a; task 1 the rest of a (one row repeated) and c whole.
    first = sink.write([_table(b + a[:2])], _task(0))
    second = sink.write([_table([a[1], a[2]]), _table(c)], _task(1))
    assert (first.docs_done, first.staged, second.docs_done, second.staged) == (1, 1, 1, 1)
    assert [r[0] for r in _stored(store, coll)] == ["b", "c", "c"]  # a is not committed in part
    sink.on_write_complete(_done(first, second))
    assert _stored(store, coll) == [("a", 0, "a text 0"), ("a", 1, "a text 1"), ("a", 2, "a text 2"),
                                    ("b", 0, "b text 0"), ("c", 0, "c text 0"), ("c", 1, "c text 1")]
    assert sink.stats.docs_done == 3 and sink.stats.staged == 2 and sink.stats.duplicate_rows == 1
    assert store.conn.execute("SELECT count(*) FROM corpusmill.staged_rows WHERE run_id = 'w1' "
                              "AND collection = 'ds_split'").fetchone()[0] == 0
    assert store.status("ds_split")["documents"]["done"] == 3


def test_a_document_still_missing_rows_at_the_end_is_recorded_and_keeps_its_old_chunks(store, pg_url):
    coll, sink = _sink(store, pg_url, "ds_missing")
    earlier = ChunkDatasink(pg_url, "corpusmill", coll, "w0", label="an earlier run")
    earlier.write([_table(_rows("a", 2, "ds_missing", texts=["old 0", "old 1"]))], _task(0))
    part = sink.write([_table(_rows("a", 3, "ds_missing")[:2])], _task(1))  # seq 2 never arrives
    sink.on_write_complete(_done(part))
    assert [f["error_class"] for f in sink.stats.failures] == ["IncompleteDocument"]
    assert "missing seq [2]" in sink.stats.failures[0]["message"]
    assert [r[2] for r in _stored(store, coll)] == ["old 0", "old 1"]
    # Rows lost on the way say nothing about the content: no content is recorded as failing, the next run retries.
    assert store.stored_documents("ds_missing")["a.md"].failed_sha256 is None


def test_a_rejected_document_fails_alone_and_its_transaction_neighbours_land(store, pg_url):
    coll, sink = _sink(store, pg_url, "ds_reject")
    store.mark_pending("ds_reject", "w1", [doc_row(d) for d in ("a", "bad", "c")])  # as a run's plan does
    bad = _rows("bad", 1, "ds_reject")
    bad[0]["embedding"] = np.array([np.nan, 0, 0, 0], dtype=np.float32)  # pgvector refuses NaN
    stats = sink.write([_table(_rows("a", 2, "ds_reject") + bad + _rows("c", 1, "ds_reject"))], _task(0))
    assert (stats.docs_done, stats.docs_failed) == (2, 1)
    assert stats.failures[0]["source_path"] == "bad.md" and stats.failures[0]["stage"] == "load"
    assert sorted({r[0] for r in _stored(store, coll)}) == ["a", "c"]
    assert store.status("ds_reject")["documents"]["failed"] == 1
    # The content's own fault: it stays failed until that content or the pipeline changes (jobs/sources/changes.py).
    assert store.stored_documents("ds_reject")["bad.md"].failed_on("sha1", "fp")


def test_a_block_of_many_documents_commits_in_groups_of_batch_documents(store, pg_url):
    names = ["a", "b", "c", "d", "e"]
    block = _table([r for d in names for r in _rows(d, 2, "ds_groups")])  # five whole documents in one block
    coll, sink = _sink(store, pg_url, "ds_groups", batch_documents=2)
    stats = sink.write([block], _task(0))
    assert (stats.transactions, stats.docs_done) == (3, 5)  # 2 + 2 + 1
    assert sorted({r[0] for r in _stored(store, coll)}) == names
    _, unlimited = _sink(store, pg_url, "ds_groups_whole")  # a reload's writers: rows and time only
    assert unlimited.write([block], _task(0)).transactions == 1


def test_writers_on_ray_store_shared_text_once_and_split_documents_whole(store, pg_url, ray_address, monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", ray_address)
    import ray
    import ray.data

    if not ray.is_initialized():
        ray.init(address=ray_address, log_to_driver=False)
    coll, sink = _sink(store, pg_url, "ds_ray", batch_rows=3)
    shared = "the same inherited options block on every page"
    docs = [_rows(f"d{i}", 3, "ds_ray", texts=[f"d{i} own 0", shared, f"d{i} own 2"]) for i in range(8)]
    rows = [r for d in docs for r in d]
    # Blocks of 5 rows: most documents span two blocks, and two write tasks take them.
    blocks = [_table(rows[i:i + 5]) for i in range(0, len(rows), 5)]
    ray.data.from_arrow(blocks).write_datasink(sink, concurrency=2)
    assert sink.stats.docs_done == 8 and sink.stats.docs_failed == 0
    stored = _stored(store, coll)
    assert len(stored) == 8 * 2 + 1  # each document's own two texts, and the shared one once
    assert sum(1 for r in stored if r[2] == shared) == 1
    assert store.shared_text_counts(coll)["copies"] == 7
    assert store.status("ds_ray")["documents"]["done"] == 8


def test_an_ingest_writer_puts_parts_in_the_run_before_committing_and_keeps_the_planned_listing(store, pg_url, tmp_path):
    from jobs.store.parquet import RunOutput, iter_parts

    coll = store.ensure_collection("ds_parts", "m", DIM)
    store.mark_pending("ds_parts", "w1", [doc_row(d) | {"source_size": 10, "source_etag": "mtime:1"} for d in "ab"])
    output = RunOutput(tmp_path / "run", DIM)
    sink = ChunkDatasink(pg_url, "corpusmill", coll, "w1", label="test ds_parts", parts=output.part_writer(),
                         keep_listing=True)
    err = {"row_kind": "error", "doc_rows": 1, "error_stage": "parse", "error_class": "ValueError",
           "error_message": "bad", "embedding": None}
    stats = sink.write([_table(_rows("a", 2, "ds_parts") + [_rows("b", 1, "ds_parts")[0] | err])], _task(3))
    assert (stats.docs_done, stats.docs_failed, stats.parts, stats.chunks, stats.vectors) == (1, 1, 1, 2, 2)
    assert stats.tokens == {20: 2} and stats.quality == {"ok": 2}
    parts = list((tmp_path / "run" / "chunks").glob("part-00000-0003-*.parquet"))
    assert len(parts) == 1
    assert [t.column("source_path").to_pylist() for t in iter_parts(tmp_path / "run")] == [["a.md", "a.md"]]
    listing = store.conn.execute("SELECT source_path, status, source_size, source_etag FROM corpusmill.documents "
                                 "WHERE collection = 'ds_parts' ORDER BY 1").fetchall()
    assert listing == [("a.md", "done", 10, "mtime:1"), ("b.md", "failed", 10, "mtime:1")]
    # A resumed run's parts come after this attempt's.
    assert RunOutput(tmp_path / "run", DIM).part_writer().attempt == 1


def test_a_task_that_cannot_write_its_part_stops_the_run_instead_of_losing_documents_quietly(store, pg_url, tmp_path):
    import pytest

    from jobs.store.parquet import PartWriter
    from jobs.store.writers import WriterFailed

    coll = store.ensure_collection("ds_fatal", "m", DIM)
    (tmp_path / "run").write_text("a file where the run directory should be")
    sink = ChunkDatasink(pg_url, "corpusmill", coll, "w1", label="test ds_fatal",
                         parts=PartWriter(str(tmp_path / "run"), DIM, 0))
    stats = sink.write([_table(_rows("a", 1, "ds_fatal"))], _task(0))
    assert stats.docs_done == 0 and [f["error_class"] for f in stats.fatal] == ["NotADirectoryError"]
    with pytest.raises(WriterFailed, match="1 write task\\(s\\) stopped; the first: NotADirectoryError"):
        sink.on_write_complete(_done(stats))
    assert store.conn.execute(f"SELECT count(*) FROM corpusmill.{coll.chunk_table}").fetchone()[0] == 0


def test_a_bug_on_the_commit_path_stops_the_run_with_exit_4_and_fails_no_document(store, pg_url, monkeypatch):
    """ArrowInvalid is a ValueError; from the COPY path it is our bug, not each document's `load` failure."""
    import pytest

    from jobs.errors import InternalError
    from jobs.store import arrow_copy

    _coll, sink = _sink(store, pg_url, "ds_bug")
    store.mark_pending("ds_bug", "w1", [doc_row(d) for d in ("a", "b")])

    def broken_copy(*args, **kwargs):
        raise pa.ArrowInvalid("column type mismatch")

    monkeypatch.setattr(arrow_copy, "copy_table", broken_copy)
    stats = sink.write([_table(_rows("a", 2, "ds_bug") + _rows("b", 1, "ds_bug"))], _task(0))
    assert stats.docs_failed == 0 and stats.fatal[0]["bug"].startswith("ArrowInvalid: column type mismatch (at ")
    with pytest.raises(InternalError, match="1 write task\\(s\\) stopped on a bug; the first: ArrowInvalid"):
        sink.on_write_complete(_done(stats))
    assert store.status("ds_bug")["documents"] == {"done": 0, "failed": 0, "pending": 2}


def test_a_stage_bug_carried_in_rows_stops_the_run_and_a_chunk_without_a_vector_fails_its_document(store, pg_url):
    import pytest

    from jobs.errors import InternalError

    _coll, sink = _sink(store, pg_url, "ds_stage_bug")
    store.mark_pending("ds_stage_bug", "w1", [doc_row(d) for d in ("a", "b", "c")])
    c = _rows("c", 1, "ds_stage_bug")
    c[0]["embedding"] = None  # arrow_copy.UnloadableChunk: that document's fault, at `load`
    first = sink.write([_table(_rows("a", 1, "ds_stage_bug") + c)], _task(0))
    assert [(f["source_path"], f["stage"], f["error_class"]) for f in first.failures] == [("c.md", "load",
                                                                                          "UnloadableChunk")]
    bug = {"row_kind": "error", "doc_rows": 1, "error_stage": "chunk", "error_class": "InternalError",
           "error_message": "stage chunk: TypeError: boom (at windows.py:7)", "embedding": None}
    second = sink.write([_table([_rows("b", 1, "ds_stage_bug")[0] | bug])], _task(1))
    assert second.docs_failed == 0 and second.fatal[0]["bug"] == "stage chunk: TypeError: boom (at windows.py:7)"
    with pytest.raises(InternalError, match="stage chunk: TypeError: boom \\(at windows.py:7\\)"):
        sink.on_write_complete(_done(first, second))
    assert store.status("ds_stage_bug")["documents"] == {"done": 1, "failed": 1, "pending": 1}
