import threading
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest

from jobs.config import JobConfig
from jobs.search.ranking import search
from jobs.store.connection import DatabaseUnavailable
from jobs.store.locks import CollectionBusy
from jobs.store.names import index_name
from jobs.store.pgvector import CollectionMismatch, PgStore
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


def test_commit_replaces_a_document_atomically_and_search_finds_it(store):
    coll = store.ensure_collection("store_t", "m", 4)
    store.mark_pending("store_t", "r1", [_doc("a")])
    assert store.commit_document(coll, _doc("a"), [_chunk("a", i, f"text {i}", _unit(i)) for i in range(3)], "r1").vectors == 3
    # a retried or updated write replaces rather than duplicates
    store.commit_document(coll, _doc("a", "sha2"), [_chunk("a", 0, "new", _unit(1))], "r2")
    rows = store.conn.execute(f"SELECT chunk_id, text FROM corpusmill.{coll.chunk_table} WHERE doc_id = 'a'").fetchall()
    assert rows == [("a-0", "new")]
    st = store.status("store_t")
    assert st["documents"]["done"] == 1 and st["chunks"] == 1
    hits = search(store, coll, _unit(1), 1)
    assert hits[0]["chunk_id"] == "a-0" and hits[0]["score"] == pytest.approx(1.0)
    view = store.conn.execute("SELECT count(*) FROM corpusmill.all_chunks WHERE collection = 'store_t'").fetchone()
    assert view[0] == 1


def test_failed_load_rolls_back_and_keeps_old_chunks(store):
    coll = store.ensure_collection("store_t", "m", 4)
    store.commit_document(coll, _doc("b"), [_chunk("b", 0, "old", _unit(0))], "r1")
    broken = _chunk("b", 0, "new text of b", None)  # no embedding: the COPY must fail
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
                             (index_name(coll.chunk_table, "hnsw"),)).fetchone()[0]
    assert "hnsw" in idx and "vector_cosine_ops" in idx


# ---- names against the server (their derivation: test_names.py) -----------------------------------

LONGEST = "l" * 40  # the longest name the collection validator allows


def test_the_longest_collection_name_gets_its_table_and_both_indexes(store):
    JobConfig(collection=LONGEST)  # the validator takes it
    coll = store.ensure_collection(LONGEST, "sentence-transformers/all-MiniLM-L6-v2", 4)
    names = [coll.chunk_table, index_name(coll.chunk_table, "doc"), index_name(coll.chunk_table, "hnsw")]
    assert all(len(n.encode()) <= 63 for n in names) and len(set(names)) == 3
    store.commit_document(coll, _doc("a"), [_chunk("a", 0, "x", _unit(0), LONGEST)], "r1")
    assert store.ensure_hnsw_index(coll) is True
    indexes = dict(store.conn.execute(
        "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'corpusmill' AND tablename = %s",
        (coll.chunk_table,)).fetchall())
    assert names[1] in indexes and "(doc_id)" in indexes[names[1]]
    assert names[2] in indexes and "USING hnsw" in indexes[names[2]]
    assert store.table_index(coll.chunk_table, "hnsw", "embedding") == names[2] and store.ensure_hnsw_index(coll) is False
    store.conn.execute("SET enable_seqscan = off")  # one row: only an index that exists can be chosen
    try:
        plan = "\n".join(r[0] for r in store.conn.execute(
            f"EXPLAIN DELETE FROM corpusmill.{coll.chunk_table} WHERE doc_id = 'a'").fetchall())
    finally:
        store.conn.execute("RESET enable_seqscan")
    assert names[1] in plan  # commits find a document's rows through its index, not a scan


def test_a_table_whose_doc_index_was_lost_to_truncation_gets_it_back(store):
    coll = store.ensure_collection("store_repair", "m", 4)
    store.conn.execute(f"DROP INDEX corpusmill.{index_name(coll.chunk_table, 'doc')}")  # as a pre-fix table was
    store.ensure_collection("store_repair", "m", 4)
    assert store.table_index(coll.chunk_table, "btree", "doc_id") == index_name(coll.chunk_table, "doc")


# ---- what the server rejects, and what it must never see ------------------------------------------

def test_nul_never_reaches_the_server_and_errors_quoting_it_are_recorded(store):
    coll = store.ensure_collection("store_nul", "m", 4)
    chunk = _chunk("n", 0, "code\x00block", _unit(0), "store_nul") | {"heading_path": ["T\x00", "H"]}
    assert store.commit_document(coll, _doc("n"), [chunk], "r1").vectors == 1
    row = store.conn.execute(f"SELECT text, heading_path FROM corpusmill.{coll.chunk_table}").fetchone()
    assert row == ("codeblock", ["T", "H"])
    store.record_failure("store_nul", _doc("n"), "r1", "load", "DataError", "bad byte \x00 here")
    assert store.status("store_nul")["failed"][0]["error"] == "[load] DataError: bad byte  here"


# ---- faults of the server -------------------------------------------------------------------------

def _kill_backend(store, pg_url):
    pid = store.conn.info.backend_pid
    with psycopg.connect(pg_url, autocommit=True) as other:
        assert other.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone()[0]


def test_a_connection_the_server_dropped_is_reopened_and_the_commit_replayed(store, pg_url):
    coll = store.ensure_collection("store_reconnect", "m", 4)
    store.lock_collection("store_reconnect", "corpusmill test r1")
    _kill_backend(store, pg_url)
    assert store.commit_document(coll, _doc("r"), [_chunk("r", 0, "after", _unit(0), "store_reconnect")], "r1").vectors == 1
    assert store.status("store_reconnect")["documents"]["done"] == 1
    # The write lock died with the old session and was taken again by the new one.
    held = store.conn.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()"
                              ).fetchone()[0]
    assert held == 1


def test_a_server_that_stays_away_stops_the_store_with_a_clear_error(store, pg_url, tmp_path):
    coll = store.ensure_collection("store_gone", "m", 4)
    store.reconnect_seconds = 1.0
    store.url = f"postgresql:///postgres?host={tmp_path}"  # a socket directory no server listens in
    _kill_backend(store, pg_url)
    with pytest.raises(DatabaseUnavailable, match="did not come back within 1 s"):
        store.commit_document(coll, _doc("g"), [_chunk("g", 0, "x", _unit(0), "store_gone")], "r1")


# ---- one writer per collection --------------------------------------------------------------------

def test_a_second_writer_of_a_collection_is_refused_naming_the_first(store, pg_url):
    store.lock_collection("store_lock", "corpusmill ingest run-one")
    with PgStore(pg_url) as second:
        with pytest.raises(CollectionBusy, match="corpusmill ingest run-one"):
            second.lock_collection("store_lock", "corpusmill ingest run-two")
        second.lock_collection("store_other", "corpusmill ingest run-two")  # other collections are free
        store.unlock_collection("store_lock")
        second.lock_collection("store_lock", "corpusmill ingest run-two", wait_seconds=1)


def test_a_waiting_writer_gets_the_lock_when_the_first_ends(store, pg_url):
    store.lock_collection("store_wait", "corpusmill ingest first")
    threading.Timer(0.5, store.close).start()  # the first run ends: its session and lock go
    with PgStore(pg_url) as second:
        second.lock_collection("store_wait", "corpusmill ingest second", wait_seconds=30)
        assert "store_wait" in second._locks


def test_two_first_runs_create_a_collection_once(pg_url):
    def create(_):
        with PgStore(pg_url) as s:
            return s.ensure_collection("store_race", "m", 4).chunk_table

    with ThreadPoolExecutor(4) as pool:
        tables = list(pool.map(create, range(4)))
    assert len(set(tables)) == 1


def test_an_index_under_an_older_truncated_name_is_found_by_what_it_indexes(store):
    coll = store.ensure_collection("store_legacy", "m", 4)
    store.commit_document(coll, _doc("l"), [_chunk("l", 0, "x", _unit(0), "store_legacy")], "r1")
    store.ensure_hnsw_index(coll)
    for kind in ("doc", "hnsw", "text"):  # as PostgreSQL truncated the names of tables 56-62 bytes long
        store.conn.execute(f"ALTER INDEX corpusmill.{index_name(coll.chunk_table, kind)} RENAME TO legacy_{kind}")
    store.ensure_collection("store_legacy", "m", 4)
    assert store.ensure_hnsw_index(coll) is False  # no second HNSW build
    names = sorted(r[0] for r in store.conn.execute(
        "SELECT indexname FROM pg_indexes WHERE schemaname = 'corpusmill' AND tablename = %s", (coll.chunk_table,)))
    # The md5(embed_text) index is an expression index, made by its name (vector reuse, #20); the metadata
    # index is made with its table (filters).
    assert names == sorted([f"{coll.chunk_table}_pkey", f"{coll.chunk_table}_embed_idx", "legacy_doc", "legacy_hnsw",
                            "legacy_text", f"{coll.chunk_table}_metadata_idx"])



def test_index_metrics_read_through_the_store_survive_a_server_restart(store):
    from jobs.checks.index_metrics import index_metrics
    from tests.test_ingest import restart_embedded_server

    coll = store.ensure_collection("store_restart", "m", 4)
    store.commit_document(coll, _doc("r"), [_chunk("r", 0, "x", _unit(0), "store_restart")], "r1")
    restart_embedded_server()  # the ingest's own connection is cut after its write, before its checks
    with pytest.raises(psycopg.OperationalError):
        index_metrics(store, coll)  # on the broken connection: what once failed a finished run
    store.reconnect()
    restart_embedded_server()
    assert store.read(index_metrics, coll)["vectors"] == 1


def _index_names(store, table: str) -> set[str]:
    return {r[0] for r in store.conn.execute(
        "SELECT indexname FROM pg_indexes WHERE schemaname = 'corpusmill' AND tablename = %s", (table,))}


def test_a_load_into_an_empty_table_builds_the_unread_indexes_after_and_a_stopped_one_gets_them_back(store):
    coll = store.ensure_collection("store_defer", "m", 4)
    deferred = {index_name(coll.chunk_table, "embed"), index_name(coll.chunk_table, "metadata")}
    assert deferred <= _index_names(store, coll.chunk_table)
    assert store.defer_indexes(coll)  # empty: dropped for the load
    assert not deferred & _index_names(store, coll.chunk_table)
    # The commit path reads neither: documents commit without them.
    store.commit_document(coll, _doc("a"), [_chunk("a", 0, "some text", _unit(0), "store_defer")], "r1")
    # A load stopped here: the next command's ensure_collection builds them again.
    store.ensure_collection("store_defer", "m", 4)
    assert deferred <= _index_names(store, coll.chunk_table)
    # On a table that holds rows nothing is dropped (a rebuild would cost more than it saves).
    assert not store.defer_indexes(coll)
    assert deferred <= _index_names(store, coll.chunk_table)


def test_checkpoint_rows_of_a_commit_keep_a_repeated_paths_last_entry_and_lose_nul(store):
    coll = store.ensure_collection("store_docs", "m", 4)
    docs = [_doc(f"d{i}") for i in range(3)]
    with store.conn.transaction():
        store._set_documents("store_docs", [(docs[0], "pending", 0, "r1", None), (docs[1], "done", 2, "r1", None),
                                            (docs[0], "done", 5, "r1", None), (docs[2], "failed", 0, "r1", "bad\x00")])
    rows = dict((r[0], r[1:]) for r in store.conn.execute(
        "SELECT source_path, status, chunk_count, last_error FROM corpusmill.documents WHERE collection = 'store_docs'"))
    assert rows == {"d0.md": ("done", 5, None), "d1.md": ("done", 2, None), "d2.md": ("failed", 0, "bad")}
    assert store.status(coll.name)["documents"]["done"] == 2


def test_chunk_rows_are_stored_inline_in_new_tables_and_from_now_on_in_older_ones(store):
    """toast_tuple_target (jobs/store/collection_ddl.py INLINE_TARGET): a chunk row stays whole in its heap
    row, no pglz pass over its texts and no TOAST insert for its vector inside the server."""
    from jobs.store.collection_ddl import INLINE_TARGET

    def options(table):
        return store.conn.execute("SELECT reloptions FROM pg_class WHERE oid = %s::regclass",
                                  (f"corpusmill.{table}",)).fetchone()[0] or []

    coll = store.ensure_collection("inline_rows", "m", 384)
    assert f"toast_tuple_target={INLINE_TARGET}" in options(coll.chunk_table)
    store.conn.execute(f"ALTER TABLE corpusmill.{coll.chunk_table} RESET (toast_tuple_target)")  # as before
    store.conn.commit()
    assert store.ensure_collection("inline_rows", "m", 384) == coll
    assert f"toast_tuple_target={INLINE_TARGET}" in options(coll.chunk_table)
