"""What commands leave behind and what they touch: staged rows of a killed run, and the `all_chunks` view,
which a command that changes no collection must leave as it is (replacing it locks out its readers)."""

from __future__ import annotations

import pyarrow as pa

from jobs.store.staging import WriterStore


def test_the_next_run_of_a_collection_clears_what_a_killed_run_staged(store, pg_url):
    with WriterStore(pg_url) as killed:  # run A stages rows of documents split across tasks, then dies
        killed.stage("run-a", "upkeep_staged", {"doc-1": pa.table({"x": [1]}), "doc-2": pa.table({"x": [2]})})
        killed.stage("run-a", "upkeep_other", {"doc-3": pa.table({"x": [3]})})
    store.lock_collection("upkeep_staged", "corpusmill ingest run-b")  # run B, with a new run id, starts
    with WriterStore(pg_url) as w:
        assert w.staged_documents("run-a", "upkeep_staged") == []
        assert w.staged_documents("run-a", "upkeep_other") == ["doc-3"]  # another collection's run may be live


def _view(store) -> tuple:
    """The view's oid, when its rule was last written (the pg_rewrite row's xmin) and its definition."""
    return store.conn.execute(
        "SELECT c.oid, r.xmin::text, pg_get_viewdef(c.oid) FROM pg_class c JOIN pg_rewrite r ON r.ev_class = c.oid "
        "WHERE c.oid = to_regclass('corpusmill.all_chunks')").fetchone()


def test_a_command_that_changes_no_collection_leaves_the_view_alone(store):
    store.ensure_collection("upkeep_view", "m", 4)
    before = _view(store)
    assert store.migrate() == []
    assert store.ensure_collection("upkeep_view", "m", 4)
    assert _view(store) == before


def test_a_new_collection_replaces_the_view_in_place_keeping_views_built_on_it(store):
    oid, _, _ = _view(store)
    # A reader's own view over all_chunks: dropping all_chunks to recreate it would fail on it.
    store.conn.execute("CREATE VIEW corpusmill.upkeep_readers AS SELECT chunk_id, source_path FROM corpusmill.all_chunks")
    try:
        coll = store.ensure_collection("upkeep_added", "m", 4)
        after, _, definition = _view(store)
        assert after == oid and coll.chunk_table in definition
        assert store.migrate() == []
        assert store.conn.execute("SELECT count(*) FROM corpusmill.upkeep_readers").fetchone()[0] >= 0
    finally:
        store.conn.execute("DROP VIEW corpusmill.upkeep_readers")
