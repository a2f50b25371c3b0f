import pytest

from jobs.store.pgvector import CollectionMismatch, chunk_table_name
from tests.factories import chunk_row, doc_row, unit_vector


def _chunk(doc_id, seq, text, vec, collection="store_t", token_count=20):
    return chunk_row(doc_id, seq, text, vec, collection, token_count)


_doc = doc_row


def _unit(i, dim=4):
    return unit_vector(i, dim)


def test_migrate_is_idempotent_and_creates_the_contract_tables(store):
    assert store.migrate() == []  # the fixture already applied everything
    names = {r[0] for r in store.conn.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'corpusmill'")}
    assert {"collections", "documents", "runs", "errors", "schema_migrations", "all_chunks"} <= names


def test_chunk_table_names_are_safe_and_bounded():
    assert chunk_table_name("notes", "sentence-transformers/all-MiniLM-L6-v2", 384) == "chunks_notes_all_minilm_l6_v2_384"
    assert len(chunk_table_name("n" * 40, "x" * 80, 1024)) <= 63


def test_commit_replaces_a_document_atomically_and_search_finds_it(store):
    coll = store.ensure_collection("store_t", "m", 4)
    store.mark_pending("store_t", "r1", [_doc("a")])
    assert store.commit_document(coll, _doc("a"), [_chunk("a", i, f"text {i}", _unit(i)) for i in range(3)], "r1") == 3
    # a retried or updated write replaces rather than duplicates
    store.commit_document(coll, _doc("a", "sha2"), [_chunk("a", 0, "new", _unit(1))], "r2")
    rows = store.conn.execute(f"SELECT chunk_id, text FROM corpusmill.{coll.chunk_table} WHERE doc_id = 'a'").fetchall()
    assert rows == [("a-0", "new")]
    st = store.status("store_t")
    assert st["documents"]["done"] == 1 and st["chunks"] == 1
    hits = store.search(coll, _unit(1), 1)
    assert hits[0]["chunk_id"] == "a-0" and hits[0]["score"] == pytest.approx(1.0)
    view = store.conn.execute("SELECT count(*) FROM corpusmill.all_chunks WHERE collection = 'store_t'").fetchone()
    assert view[0] == 1


def test_failed_load_rolls_back_and_keeps_old_chunks(store):
    coll = store.ensure_collection("store_t", "m", 4)
    store.commit_document(coll, _doc("b"), [_chunk("b", 0, "old", _unit(0))], "r1")
    broken = _chunk("b", 0, "new", None)  # no embedding: the COPY must fail
    with pytest.raises(ValueError, match="without an embedding"):
        store.commit_document(coll, _doc("b", "sha2"), [broken], "r2")
    text = store.conn.execute(f"SELECT text FROM corpusmill.{coll.chunk_table} WHERE doc_id = 'b'").fetchall()
    assert text == [("old",)]
    store.record_failure("store_t", _doc("b"), "r2", "sink", "ValueError", "boom")
    st = store.status("store_t")
    assert {"source_path": "b.md", "error": "[sink] ValueError: boom"} in st["failed"]
    assert store.stored_documents("store_t")["b.md"].status == "failed"


def test_delete_document_removes_chunks_and_checkpoint(store):
    coll = store.ensure_collection("store_t", "m", 4)
    store.commit_document(coll, _doc("c"), [_chunk("c", 0, "bye", _unit(2))], "r1")
    assert store.delete_document(coll, "c.md") == 1
    assert "c.md" not in store.stored_documents("store_t")


def test_collection_model_mismatch_is_refused(store):
    store.ensure_collection("store_t", "m", 4)
    with pytest.raises(CollectionMismatch, match="reembed"):
        store.ensure_collection("store_t", "other-model", 8)


def test_hnsw_index_is_built_after_load_once(store):
    coll = store.ensure_collection("store_idx", "m", 4)
    assert store.ensure_hnsw_index(coll) is False  # empty: nothing to index yet
    store.commit_document(coll, _doc("d"), [_chunk("d", 0, "x", _unit(0), "store_idx")], "r1")
    assert store.ensure_hnsw_index(coll) is True
    assert store.ensure_hnsw_index(coll) is False
    idx = store.conn.execute("SELECT indexdef FROM pg_indexes WHERE indexname = %s",
                             (f"{coll.chunk_table}_hnsw",)).fetchone()[0]
    assert "hnsw" in idx and "vector_cosine_ops" in idx
