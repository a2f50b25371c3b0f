"""jobs/store/writers.py under real concurrency: two connections racing on the embedded PostgreSQL.

A deadlock between a writer and another transaction is really provoked (the writer's deadlock detector
set to fire first, so the writer is the one the server rolls back), and the writer's retry commits the
document whole; two writers committing overlapping texts in opposite orders take the texts' locks in
one order, so they never deadlock and each text ends up held once."""

import threading
import time

import psycopg

from jobs.rows import CHUNK_SCHEMA
from jobs.store.sink_stats import SinkStats
from jobs.store.staging import WriterStore
from jobs.store.writers import DocumentWriter
from tests.factories import chunk_row, doc_row, unit_vector

DIM = 4


def _table(doc: str, texts: list[str], collection: str):
    import pyarrow as pa

    rows = [chunk_row(doc, i, t, unit_vector(i, DIM), collection) | doc_row(doc)
            | {"row_kind": "chunk", "doc_rows": len(texts), "run_id": "w1"} for i, t in enumerate(texts)]
    return pa.Table.from_pylist([{k: r.get(k) for k in CHUNK_SCHEMA.names} for r in rows], schema=CHUNK_SCHEMA)


def _deadlocks(pg_url: str) -> int:
    with psycopg.connect(pg_url) as conn:
        return conn.execute("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()").fetchone()[0]


def _wait_until_waiting(pg_url: str, application_name: str) -> None:
    deadline = time.monotonic() + 60
    with psycopg.connect(pg_url, autocommit=True) as conn:
        while time.monotonic() < deadline:
            if conn.execute("SELECT 1 FROM pg_stat_activity WHERE application_name = %s AND wait_event_type = 'Lock'",
                            (application_name,)).fetchone():
                return
            time.sleep(0.02)
    raise AssertionError(f"{application_name} never waited on a lock")


def test_a_writer_rolled_back_by_a_real_deadlock_commits_its_document_on_retry(store, pg_url):
    coll = store.ensure_collection("race_deadlock", "m", DIM)
    doc = doc_row("a")
    store.mark_pending(coll.name, "w1", [doc])
    store.commit_document(coll, doc, [chunk_row("a", 0, "old text", unit_vector(0, DIM), coll.name)], "w1")
    writer = DocumentWriter(pg_url, "corpusmill", coll, "w1", label="race writer")
    stats = SinkStats()
    before = _deadlocks(pg_url)
    with psycopg.connect(pg_url, autocommit=True) as other, WriterStore(pg_url, "corpusmill",
                                                                         application_name="race writer") as ws:
        ws.conn.execute("SET deadlock_timeout = '200ms'")  # the writer detects first: it is the one rolled back
        with other.transaction():
            other.execute("SET LOCAL deadlock_timeout = '30s'")
            other.execute("UPDATE corpusmill.documents SET updated_at = now() WHERE collection = %s AND doc_id = 'a'",
                          (coll.name,))
            table = _table("a", ["new text one", "new text two"], coll.name)
            done = threading.Thread(target=writer._commit_batch, args=(ws, [doc_row("a")], table, stats))
            done.start()
            _wait_until_waiting(pg_url, "race writer")  # it deleted a's chunks and waits for a's checkpoint row
            other.execute(f"DELETE FROM corpusmill.{coll.chunk_table} WHERE doc_id = 'a'")  # and now the cycle
        done.join(timeout=60)
    assert _deadlocks(pg_url) > before
    assert stats.transactions == 1 and stats.docs_done == 1
    texts = [r[0] for r in store.conn.execute(f"SELECT text FROM corpusmill.{coll.chunk_table} ORDER BY seq")]
    assert texts == ["new text one", "new text two"]
    assert store.stored_documents(coll.name)["a.md"].status == "done"


def test_two_writers_with_overlapping_texts_in_opposite_orders_never_deadlock_and_hold_each_text_once(store, pg_url):
    coll = store.ensure_collection("race_texts", "m", DIM)
    texts = [f"a paragraph both pages carry, number {i}" for i in range(40)]
    before = _deadlocks(pg_url)
    for name in ("p", "q"):
        store.mark_pending(coll.name, "w1", [doc_row(name)])
    start = threading.Barrier(2)
    errors = []

    def commit(name: str, order: list[str]) -> None:
        try:
            with WriterStore(pg_url, "corpusmill", application_name=f"race {name}") as ws:
                table = _table(name, order, coll.name)
                start.wait()
                for _ in range(5):  # commit the same document again and again: every round races the other
                    ws.commit_documents(coll, [doc_row(name)], table, "w1")
        except Exception as exc:  # reported below, with the thread's name
            errors.append((name, exc))

    threads = [threading.Thread(target=commit, args=("p", texts)), threading.Thread(target=commit, args=("q", texts[::-1]))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == [] and _deadlocks(pg_url) == before
    held = store.conn.execute(f"SELECT text_sha256, count(*) FROM corpusmill.{coll.chunk_table} GROUP BY 1").fetchall()
    copies = store.conn.execute("SELECT count(*) FROM corpusmill.shared_text WHERE collection = %s",
                                (coll.name,)).fetchone()[0]
    assert len(held) == 40 and all(n == 1 for _, n in held) and copies == 40
