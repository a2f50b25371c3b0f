"""jobs/store/write_progress.py: a run's progress counts what this attempt writes, against its total."""

from __future__ import annotations

import psycopg

from jobs.store.write_progress import Progress
from tests.factories import chunk_row, doc_row, unit_vector


def _commit(store, coll, name: str, run_id: str, size: int = 100) -> None:
    doc = doc_row(name) | {"source_size": size, "source_etag": None}
    store.mark_pending(coll.name, run_id, [doc])
    store.commit_document(coll, doc, [chunk_row(doc["doc_id"], i, f"{name} text {i}", unit_vector(i, 4), coll.name)
                                      for i in range(2)], run_id)


def test_a_resumed_run_counts_only_what_it_writes_now_and_a_further_round_adds_to_the_total(store, pg_url):
    coll = store.ensure_collection("progress_t", "m", 4)
    for name in ("a", "b"):  # committed by the run's first attempt, before it was killed
        _commit(store, coll, name, "r1")
    progress = Progress(pg_url, store.schema, coll.name, "r1", total=1, every=60.0, live=False)
    with progress:
        _commit(store, coll, "c", "r1")
        with psycopg.connect(pg_url, autocommit=True) as conn:
            assert progress.sample(conn) == (1, 0, 2)  # c and its two vectors, not a and b again
        progress.extend(2)  # a round that re-chunks two documents others released
        assert progress.total == progress.line.total == 3


def test_the_work_is_the_bytes_of_this_attempts_documents_settled_and_in_all(store, pg_url):
    coll = store.ensure_collection("progress_bytes", "m", 4)
    _commit(store, coll, "a", "r2", size=1_000)  # the first attempt's
    progress = Progress(pg_url, store.schema, coll.name, "r2", total=2, every=60.0, live=False)
    with progress:
        store.mark_pending(coll.name, "r2", [doc_row(n) | {"source_size": s, "source_etag": None}
                                             for n, s in (("b", 200), ("c", 9_000))])
        _commit(store, coll, "b", "r2", size=200)
        with psycopg.connect(pg_url, autocommit=True) as conn:
            assert progress.work(conn) == (200, 9_200)  # b settled; c, the large one, still to come
