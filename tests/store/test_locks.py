"""jobs/store/locks.py, the fence: a run whose driver lost the collection's lock commits nothing once
another run took it, a commit in flight finishes before the new owner's token is written, and the
driver's watch stops the run. Two real connections (two runs) on the embedded PostgreSQL."""

import threading
import time

import psycopg
import pytest

from jobs.store import locks
from jobs.store.pgvector import PgStore
from jobs.store.work_items import WorkItems
from tests.factories import chunk_row, doc_row, unit_vector

DIM = 4


def _backend_pid(store: PgStore) -> int:
    return store.conn.execute("SELECT pg_backend_pid()").fetchone()[0]


def _terminate(pg_url: str, pid: int) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(%s)", (pid,))


def _commit(store: PgStore, coll, name: str, owner: str | None, text: str = "x"):
    doc = doc_row(name)
    store.mark_pending(coll.name, "r", [doc])
    return store.commit_documents(coll, [doc], _table(coll, name, text), "r", owner=owner)


def _table(coll, name, text):
    from jobs.store.arrow_copy import rows_table

    return rows_table([chunk_row(name, 0, text, unit_vector(0, DIM), coll.name)])


def _status(pg_url, collection, doc_id):
    with psycopg.connect(pg_url) as conn:
        row = conn.execute("SELECT status FROM corpusmill.documents WHERE collection = %s AND doc_id = %s",
                           (collection, doc_id)).fetchone()
    return row[0] if row else None


def test_a_writer_of_a_run_that_lost_the_collection_commits_nothing(pg_url):
    with PgStore(pg_url) as first, PgStore(pg_url) as writer:
        first.migrate()
        first.lock_collection("fence1", "corpusmill ingest first")
        coll = first.ensure_collection("fence1", "m", DIM)
        token = first.owner_token("fence1")
        _commit(writer, coll, "before", token)  # the writer commits while its run owns the collection
        _terminate(pg_url, _backend_pid(first))  # the first run's driver session is cut: its lock is gone
        with PgStore(pg_url) as second:
            second.lock_collection("fence1", "corpusmill ingest second")
            assert second.owner_token("fence1") != token
            with pytest.raises(locks.OwnershipLost, match="corpusmill ingest second took collection 'fence1'"):
                _commit(writer, coll, "after", token)
            assert _status(pg_url, "fence1", "after") == "pending"  # marked, never committed
            assert _status(pg_url, "fence1", "before") == "done"
            with pytest.raises(locks.OwnershipLost):
                writer.record_failure("fence1", doc_row("after"), "r", "load", "X", "y", owner=token)
            _commit(writer, coll, "theirs", second.owner_token("fence1"))  # the new owner's writers commit
            # The first driver reconnects: its lock is held, so it stops rather than write on.
            with pytest.raises(locks.CollectionBusy):
                first.reconnect()


def test_a_new_owner_waits_for_a_commit_in_flight_and_a_reconnect_after_it_left_is_refused(pg_url):
    with PgStore(pg_url) as first, PgStore(pg_url) as writer, PgStore(pg_url) as second:
        first.migrate()
        first.lock_collection("fence2", "corpusmill ingest first")
        token = first.owner_token("fence2")
        with writer.conn.transaction():  # a commit of the first run, mid-way
            locks.check_lease(writer.conn, writer.schema, "fence2", token)
            first_pid = _backend_pid(first)
            _terminate(pg_url, first_pid)
            # Termination is asynchronous: until the backend has gone, its session still holds the
            # collection's lock, and the second run would find the first alive instead of taking over.
            _until_gone(pg_url, first_pid)
            took = threading.Thread(target=second.lock_collection, args=("fence2", "corpusmill ingest second"))
            took.start()
            second_pid = None
            deadline = time.monotonic() + 60
            with psycopg.connect(pg_url, autocommit=True) as watch:
                while second_pid is None and time.monotonic() < deadline:
                    row = watch.execute("SELECT pid FROM pg_stat_activity WHERE application_name = "
                                        "'corpusmill ingest second' AND wait_event_type = 'Lock'").fetchone()
                    second_pid = row[0] if row else None
                    time.sleep(0.05)
            assert second_pid, "the new owner did not wait for the commit in flight"
        took.join(timeout=60)
        assert second.owner_token("fence2") not in (None, token)
        second.unlock_collection("fence2")  # the second run ends: the lock is free, the token stays its
        with pytest.raises(locks.OwnershipLost):
            first.reconnect()  # the lock is free, but the collection was taken meanwhile


def test_overlapping_commits_of_several_writers_do_not_hold_a_takeover_off(pg_url):
    """Two writers whose commits overlap without a gap (one always in flight) must not keep a new owner
    waiting until they have committed everything: their next commits queue behind the takeover and stop."""
    rounds = 100
    with PgStore(pg_url) as first, PgStore(pg_url) as second:
        first.migrate()
        first.lock_collection("fence6", "corpusmill ingest first")
        token = first.owner_token("fence6")
        commits, lost, started = [0, 0], [None, None], threading.Barrier(3)

        def write(i: int) -> None:
            with PgStore(pg_url) as writer:
                started.wait()
                time.sleep(0.1 * i)  # staggered: the other writer's commit is always mid-way
                try:
                    for _ in range(rounds):
                        with writer.conn.transaction():
                            locks.check_lease(writer.conn, writer.schema, "fence6", token)
                            time.sleep(0.2)
                        commits[i] += 1
                except locks.OwnershipLost as e:
                    lost[i] = e

        writers = [threading.Thread(target=write, args=(i,)) for i in range(2)]
        for w in writers:
            w.start()
        started.wait()
        while min(commits) < 3:  # both writers are committing back to back
            time.sleep(0.05)
        first.unlock_collection("fence6")  # the first run's driver lost its lock
        second.lock_collection("fence6", "corpusmill ingest second")
        for w in writers:
            w.join(timeout=120)
        assert all(isinstance(e, locks.OwnershipLost) for e in lost), (commits, lost)
        assert max(commits) < rounds


def test_the_watch_interrupts_the_driver_once_another_run_owns_the_collection(pg_url):
    with PgStore(pg_url) as first, PgStore(pg_url) as second:
        first.migrate()
        first.lock_collection("fence3", "corpusmill ingest first")
        watch = locks.LeaseWatch(pg_url, first.schema, "fence3", first.owner_token("fence3"), every=0.05)
        with pytest.raises(KeyboardInterrupt), watch:
            first.unlock_collection("fence3")
            second.lock_collection("fence3", "corpusmill ingest second")
            for _ in range(1200):  # the interrupt arrives between two of these
                time.sleep(0.05)
        assert "corpusmill ingest second took collection 'fence3'" in watch.lost


def test_the_watch_cancels_running_work_instead_of_interrupting_and_interrupts_again_if_one_was_lost(pg_url):
    """A cancel that had work running (a Ray job: jobs.ray_session.JobCancel) is called with the reason and
    the main thread is left alone; with nothing to cancel, the interrupt is repeated until the run leaves
    the watch, since one that lands in a finalizer is dropped."""
    with PgStore(pg_url) as first, PgStore(pg_url) as second:
        first.migrate()
        first.lock_collection("fence4", "corpusmill ingest first")
        watch = locks.LeaseWatch(pg_url, first.schema, "fence4", first.owner_token("fence4"), every=0.05)
        called = []
        watch.on_lost(lambda reason: called.append(reason) or True)
        with watch:
            first.unlock_collection("fence4")
            second.lock_collection("fence4", "corpusmill ingest second")
            for _ in range(1200):
                if called:
                    break
                time.sleep(0.05)
            time.sleep(0.5)  # no interrupt follows a cancel that stopped running work
        assert called == [watch.lost] and "corpusmill ingest second took collection 'fence4'" in called[0]

        first.lock_collection("fence5", "corpusmill ingest first")
        watch = locks.LeaseWatch(pg_url, first.schema, "fence5", first.owner_token("fence5"), every=0.05)
        watch.REPEAT = 0.2
        watch.on_lost(lambda reason: False)  # nothing was running: the main thread is interrupted
        swallowed = 0
        # The takeover from another thread: the main thread is only ever in the loop below, where an
        # interrupt is expected (a busy machine could land one inside the takeover's own statement).
        takeover = threading.Thread(target=second.lock_collection, args=("fence5", "corpusmill ingest second"))
        with pytest.raises(KeyboardInterrupt), watch:
            first.unlock_collection("fence5")
            takeover.start()
            for _ in range(1200):
                try:
                    time.sleep(0.05)
                except KeyboardInterrupt:
                    if swallowed:
                        raise
                    swallowed += 1  # as a finalizer would drop it: the watch interrupts again
        takeover.join(timeout=60)
        assert swallowed == 1


def test_the_main_thread_is_interrupted_where_sigint_is_ignored():
    """A run started as `corpusmill ingest … &` from a script ignores SIGINT; the watch still stops it."""
    import signal

    saved = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        threading.Timer(0.2, locks.interrupt_main).start()
        with pytest.raises(KeyboardInterrupt):
            for _ in range(200):
                time.sleep(0.05)
    finally:
        signal.signal(signal.SIGINT, saved)


def _until_gone(url: str, pid: int, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    with psycopg.connect(url, autocommit=True) as conn:
        while conn.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone():
            assert time.monotonic() < deadline, f"backend {pid} still there {seconds} s after its client closed"
            time.sleep(0.05)


def test_a_new_run_keeps_the_work_items_of_a_live_run_and_clears_a_dead_ones(pg_url):
    with PgStore(pg_url) as store:
        store.migrate()
    item = {"source_type": "markdown", "source_path": "a.md"}
    live = WorkItems(pg_url, "corpusmill", "items", "run-live").__enter__()
    dead = WorkItems(pg_url, "corpusmill", "items", "run-dead").__enter__()
    try:
        live.add([item], [(1, None)])
        dead.add([item], [(1, None)])
        pid = dead.conn.info.backend_pid
        dead.conn.close()  # its driver died: its rows stay behind
        _until_gone(pg_url, pid)  # the server ends the session (and its lock) a moment after the close
        with WorkItems(pg_url, "corpusmill", "items", "run-new") as new:
            with psycopg.connect(pg_url) as conn:
                left = {r[0] for r in conn.execute(
                    "SELECT run_id FROM corpusmill.work_items WHERE collection = 'items'")}
            assert left == {"run-live"}
            assert new.counts() == {}
    finally:
        live.__exit__(None, None, None)


def test_a_run_killed_without_a_word_is_recorded_aborted_by_the_next_run_that_takes_the_collection(pg_url):
    with PgStore(pg_url) as first:
        first.migrate()
        first.lock_collection("fence7", "corpusmill ingest killed")
        first.start_run("killed-run", "fence7", {}, "fp", "/tmp/runs/killed-run")  # then kill -9: nothing more
    with PgStore(pg_url) as second:
        second.lock_collection("fence7", "corpusmill ingest next")
        row = second.conn.execute("SELECT status, finished_at FROM corpusmill.runs WHERE run_id = 'killed-run'")
        assert row.fetchone() == ("aborted", None)
