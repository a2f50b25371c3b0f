"""Commits of any size: a transaction's locks do not grow with its rows, and a fault the same command
cannot get past is never reported as resumable."""

from types import SimpleNamespace

import psycopg
import pyarrow as pa
import pytest

from jobs.rows import CHUNK_SCHEMA
from jobs.store import arrow_copy, faults, shared_text
from jobs.store.pgvector import PgStore
from jobs.store.sink_stats import SinkStats
from jobs.store.writers import DocumentWriter, WriterFailed
from tests.factories import chunk_row, doc_row, unit_vector

DIM = 4
CHUNKS_PER_DOC = 5


def _lock_table_slots(conn) -> int:
    """What the server's shared lock table holds: max_locks_per_transaction × the backends it serves."""
    settings = dict(conn.execute(
        "SELECT name, setting::int FROM pg_settings WHERE name IN ('max_locks_per_transaction', 'max_connections', "
        "'max_prepared_transactions', 'autovacuum_max_workers', 'max_worker_processes', 'max_wal_senders')"))
    backends = sum(v for k, v in settings.items() if k != "max_locks_per_transaction")
    return settings["max_locks_per_transaction"] * (backends + 1)


def _part(collection: str, docs: int, tag: str = "") -> pa.Table:
    """One block of whole documents, every chunk a distinct text: a large Parquet part's shape."""
    rows = []
    for d in range(docs):
        doc = f"d{d:06d}"
        rows += [chunk_row(doc, i, f"{doc} distinct text {i}{tag}", unit_vector(i, DIM), collection) | doc_row(doc)
                 | {"row_kind": "chunk", "doc_rows": CHUNKS_PER_DOC, "run_id": "big"} for i in range(CHUNKS_PER_DOC)]
    return pa.Table.from_pylist([{k: r.get(k) for k in CHUNK_SCHEMA.names} for r in rows], schema=CHUNK_SCHEMA)


def _stored(store, coll) -> int:
    return store.conn.execute(f"SELECT count(*) FROM corpusmill.{coll.chunk_table}").fetchone()[0]


def test_one_transaction_commits_more_distinct_texts_than_the_lock_table_holds(store, pg_url):
    # More texts in one commit than the whole server's lock table holds (its nominal slots; the shared
    # memory's slack lets it hold up to about twice as many): one advisory lock per text failed here with
    # "out of shared memory ... increase max_locks_per_transaction".
    texts = _lock_table_slots(store.conn) * 3
    docs = -(-texts // CHUNKS_PER_DOC)
    coll = store.ensure_collection("commit_big", "m", DIM)
    part = _part(coll.name, docs)
    writer = DocumentWriter(pg_url, "corpusmill", coll, "big", label="test commit_big", batch_rows=10 ** 9,
                            batch_seconds=10 ** 9)
    stats = writer.write([part], SimpleNamespace(task_idx=0))
    assert stats.fatal == [] and stats.transactions == 1  # the whole part in one transaction
    assert (stats.docs_done, stats.vectors, _stored(store, coll)) == (docs, part.num_rows, part.num_rows)
    # A rerun of the same part replaces every document with itself: nothing added, nothing lost.
    again = writer.write([part], SimpleNamespace(task_idx=0))
    assert again.fatal == [] and _stored(store, coll) == part.num_rows and again.shared == 0


def test_the_locks_a_commit_takes_are_bounded_whatever_its_rows():
    many = [f"{i:064x}" for i in range(0, 2 ** 40, 2 ** 40 // 50_000)]
    keys = shared_text.lock_buckets(many)
    assert len(keys) <= shared_text.TEXT_LOCK_BUCKETS and keys == sorted(keys)
    # one text, one key: two commits of the same text always meet on it
    assert shared_text.lock_buckets(["ab" * 32]) == shared_text.lock_buckets(["ab" * 32, "ab" * 32])


def test_a_large_block_is_committed_in_transactions_of_whole_documents(store, pg_url):
    coll = store.ensure_collection("commit_split", "m", DIM)
    part = _part(coll.name, 100)
    writer = DocumentWriter(pg_url, "corpusmill", coll, "big", label="test commit_split", batch_rows=52,
                            batch_seconds=10 ** 9)
    stats = writer.write([part], SimpleNamespace(task_idx=0))
    # 52 rows hold 10 whole documents of 5 chunks: 10 transactions of 50 rows, none splits a document
    assert stats.fatal == [] and stats.transactions == 10 and _stored(store, coll) == 500


def test_the_commits_that_fill_a_new_table_find_documents_through_its_index(store, pg_url):
    # A new table has no statistics until autovacuum comes by, and without them the planner prices a
    # commit's `doc_id = ANY(…)` at half the table: every commit of a bulk load read the whole growing
    # table. The first commit leaves statistics in which a document is a share of the rows.
    coll = store.ensure_collection("commit_stats", "m", DIM)
    writer = DocumentWriter(pg_url, "corpusmill", coll, "big", label="test commit_stats", batch_rows=500,
                            batch_seconds=10 ** 9)
    assert writer.write([_part(coll.name, 4000)], SimpleNamespace(task_idx=0)).fatal == []
    table = store._t(coll.chunk_table).as_string(store.conn)
    # The DELETE the next commit runs first, for a commit's worth of documents the table does not hold yet.
    plan = "\n".join(r[0] for r in store.conn.execute(
        f"EXPLAIN DELETE FROM {table} WHERE doc_id = ANY(%s) RETURNING doc_id, text_sha256",
        ([f"new{i}" for i in range(100)],)))
    assert "_doc_idx" in plan and "Seq Scan" not in plan, plan
    n_distinct = store.conn.execute("SELECT n_distinct FROM pg_stats WHERE schemaname = 'corpusmill' "
                                    "AND tablename = %s AND attname = 'doc_id'", (coll.chunk_table,)).fetchone()[0]
    assert n_distinct < 0  # a share of the rows, which holds as the table grows; a count would not


def test_a_text_two_commits_race_for_is_stored_once(store, pg_url):
    # The COPY goes before the text locks: a commit whose lock-free guess another commit of the same
    # text overtook, between the guess and the locked check, takes its row back out.
    coll = store.ensure_collection("commit_race", "m", DIM)
    # A first commit settles what a collection's first commit sets (its BM25 pivot), so that the rival's
    # commit below, inside our open transaction, waits on nothing of ours.
    store.commit_document(coll, doc_row("z"), [chunk_row("z", 0, "another text", unit_vector(2, DIM), coll.name)], "r0")
    mine = arrow_copy.rows_table([chunk_row("a", 0, "the same block", unit_vector(0, DIM), coll.name)])
    table = store._t(coll.chunk_table)

    def copy_then_overtaken(conn, target, rows):
        arrow_copy.copy_table(conn, target, rows)
        with PgStore(pg_url) as other:  # another writer commits b, holding the text, before our check
            rival = [chunk_row("b", 0, "the same block", unit_vector(1, DIM), coll.name)]
            assert other.commit_document(coll, doc_row("b"), rival, "r1").vectors == 1

    with store.conn.transaction():
        keep = shared_text.copy_stored(store.conn, table, mine, set(), copy_then_overtaken)
    assert keep == [False]
    assert [r[0] for r in store.conn.execute(
        f"SELECT doc_id FROM corpusmill.{coll.chunk_table} WHERE text = 'the same block'")] == ["b"]


@pytest.mark.parametrize(("error", "again"), [
    (psycopg.errors.OutOfMemory("out of shared memory"), False),  # a lock table too small: same batches, same fault
    (psycopg.errors.DiskFull("could not extend file"), False),
    (psycopg.errors.AdminShutdown("terminating connection"), True),
    (psycopg.errors.DeadlockDetected("deadlock detected"), True),
    (psycopg.OperationalError("server closed the connection unexpectedly"), True),
    (ConnectionResetError("reset"), True),
    (OSError(28, "No space left on device", "/runs/x"), False),
])
def test_only_a_fault_the_same_command_gets_past_is_called_resumable(error, again):
    assert faults.resumable(error) is again
    assert ("run the same command again to resume" in faults.advice(error)) is again


def test_a_writer_stopped_by_a_stuck_fault_does_not_say_resume(store, pg_url):
    coll = store.ensure_collection("commit_stuck", "m", DIM)
    writer = DocumentWriter(pg_url, "corpusmill", coll, "big", label="test commit_stuck")
    stuck = {"error_class": "OutOfMemory", "message": "out of shared memory\nHINT: increase max_locks_per_transaction",
             "database": True, "bug": None, "advice": faults.advice(psycopg.errors.OutOfMemory()), "resumable": False}
    with pytest.raises(WriterFailed) as failed:
        writer.complete([SinkStats(fatal=[stuck])])
    assert not failed.value.resumable and "again to resume" not in str(failed.value)
    assert "max_locks_per_transaction" in str(failed.value) and "\n" not in str(failed.value)
