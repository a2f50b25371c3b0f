"""jobs/store/index_build.py: the HNSW build session's memory, workers and progress."""

import logging

from jobs.store import index_build


def test_the_build_takes_the_memory_its_graph_needs_up_to_the_ceiling():
    small = index_build.graph_bytes(10_000, 4 * 384 + 8, 16)
    big = index_build.graph_bytes(1_000_000, 4 * 384 + 8, 16)
    assert big == 100 * small and 1.5e9 < big < 3e9  # a million float32 vectors of 384: about 2 GB
    current_kb = 64 * 1024
    assert index_build.memory_setting(small, 4096, current_kb) == (current_kb, None)  # fits the server's own
    kb, warning = index_build.memory_setting(big, 4096, current_kb)
    assert warning is None and kb * 1024 >= big
    kb, warning = index_build.memory_setting(big, 1024, current_kb)
    assert kb == 1024 * 1024 and "database.index_memory_mb (1024 MB)" in warning and "on disk" in warning
    half = index_build.graph_bytes(1_000_000, 2 * 384 + 8, 16)
    assert half < 0.7 * big


def test_progress_reads_as_a_share_of_rows_or_blocks():
    assert index_build.describe("loading tuples", 250, 1000, 0, 0) == "loading tuples, 250 of 1,000 rows (25 %)"
    assert index_build.describe("building index", 0, 0, 5, 20) == "building index, 5 of 20 blocks (25 %)"
    assert index_build.describe("initializing", 0, 0, 0, 0) == "initializing"


def test_a_build_logs_its_plan_and_its_seconds(store, caplog):
    import numpy as np
    from psycopg import sql

    coll = store.ensure_collection("build_t", "m", 4)
    store.conn.execute(sql.SQL("INSERT INTO {} (chunk_id, doc_id, embedding) SELECT 'c' || i, 'd', %s "
                               "FROM generate_series(1, 50) i").format(sql.Identifier(store.schema, coll.chunk_table)),
                       (np.array([1, 0, 0, 0], dtype=np.float32),))
    assert index_build.parallel_workers(store.conn, store.url) >= 0
    with caplog.at_level(logging.INFO, logger="jobs.store.index_build"):
        assert store.ensure_hnsw_index(coll, memory_mb=64) is True
    text = caplog.text
    assert "building an HNSW index over 50 rows" in text and "HNSW index built in" in text
