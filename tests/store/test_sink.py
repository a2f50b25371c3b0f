"""The sink against the real store: each seq once, one document's database error isolated to it."""

from jobs.store.names import index_name
from jobs.store.parquet import RunOutput
from jobs.store.sink import DocumentSink
from tests.factories import chunk_row, doc_row, unit_vector


def _rows(doc, n, collection, **extra):
    return [chunk_row(doc, i, f"{doc} text {i}", unit_vector(i, 4), collection) | doc_row(doc)
            | {"row_kind": "chunk", "doc_rows": n, "run_id": "r1"} | extra for i in range(n)]


def _sink(store, tmp_path, collection, total):
    coll = store.ensure_collection(collection, "m", 4)
    store.mark_pending(collection, "r1", [doc_row(d) for d in ("a", "b", "c")])
    return coll, DocumentSink(store, coll, RunOutput(tmp_path / "run", 4), "r1", total, flush_rows=1, flush_seconds=0)


def test_a_document_commits_when_each_seq_arrived_once_and_repeats_are_dropped(store, tmp_path):
    coll, sink = _sink(store, tmp_path, "sink_seq", 2)
    a, b = _rows("a", 3, "sink_seq"), _rows("b", 2, "sink_seq")
    sink.write([a[0], a[0], a[1]])  # seq 0 twice: as many rows as doc_rows, but seq 2 is missing
    assert sink.stats.docs_done == 0
    sink.write([a[2], b[1], a[1]])
    assert sink.stats.docs_done == 1 and sink.stats.duplicate_rows == 2
    sink.write([b[1]])
    sink.flush()
    sink.record_lost([doc_row("a"), doc_row("b")])
    assert sink.stats.failures == [{
        "source_path": "b.md", "stage": "sink", "error_class": "IncompleteDocument",
        "message": "received 1 of 2 rows (missing seq [0]); it will be retried"}]
    stored = store.conn.execute(f"SELECT doc_id, count(*) FROM corpusmill.{coll.chunk_table} GROUP BY doc_id").fetchall()
    assert stored == [("a", 3)]


def test_a_document_the_database_rejects_fails_alone_and_the_run_goes_on(store, tmp_path):
    coll, sink = _sink(store, tmp_path, "sink_reject", 3)
    sink.write(_rows("a", 1, "sink_reject"))
    # A real rejection by PostgreSQL that Parquet takes: pgvector refuses NaN (a model that overflowed).
    bad = _rows("b", 2, "sink_reject")
    bad[1]["embedding"] = unit_vector(0, 4) * float("nan")
    sink.write(bad)
    sink.write(_rows("c", 1, "sink_reject"))
    sink.flush()
    assert sink.stats.docs_done == 2 and sink.stats.docs_failed == 1
    failure = sink.stats.failures[0]
    assert failure["source_path"] == "b.md" and failure["stage"] == "load" and failure["error_class"] == "DataException"
    assert "NaN" in failure["message"]
    st = store.status("sink_reject")
    assert st["documents"] == {"done": 2, "failed": 1, "pending": 0} and st["chunks"] == 2
    assert not store.conn.execute(f"SELECT 1 FROM corpusmill.{coll.chunk_table} WHERE doc_id = 'b'").fetchall()
    assert store.table_index(coll.chunk_table, "btree", "doc_id") == index_name(coll.chunk_table, "doc")
