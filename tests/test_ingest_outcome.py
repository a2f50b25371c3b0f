"""The line a run the database stopped ends with (jobs/ingest_outcome.py), without a server or Ray: the
end-to-end stops (a restart, a second run taking the collection) are in tests/test_ingest.py."""

import psycopg

from jobs.ingest_outcome import cause_of, database_stopped, stop_message
from jobs.store.connection import DatabaseUnavailable
from jobs.store.locks import OwnershipLost
from jobs.store.writers import WriterFailed


def test_a_lost_server_says_how_to_resume():
    cause = DatabaseUnavailable("PostgreSQL did not come back within 5 s (connection refused)\nmore")
    assert database_stopped(cause)
    assert stop_message("r1", "after 3 of 9 documents", cause) == (
        "run r1 stopped after 3 of 9 documents: PostgreSQL did not come back within 5 s (connection refused). "
        "Every committed document is kept; run the same command again to resume (the rest are still pending)")


def test_a_run_whose_collection_was_taken_says_only_that():
    cause = OwnershipLost("run r2 took collection 'c'")
    assert database_stopped(cause)
    assert stop_message("r1", "after 1 of 2 documents", cause) == (
        "run r1 stopped after 1 of 2 documents: run r2 took collection 'c'")


def test_a_full_disk_says_what_must_change_instead_of_resuming():
    cause = psycopg.errors.DiskFull("could not extend file")
    message = stop_message("r1", "after 0 of 2 documents", cause)
    assert message.startswith("run r1 stopped after 0 of 2 documents: could not extend file. Every committed")
    assert "would stop the same way" in message and "run the same command again to resume" not in message


def test_a_writer_that_failed_for_good_says_its_own_line_only():
    cause = WriterFailed("a write task could not write its part: disk full", database=True, resumable=False)
    assert database_stopped(cause)
    assert stop_message("r1", "after 0 of 2 documents", cause) == (
        "run r1 stopped after 0 of 2 documents: a write task could not write its part: disk full")


def test_a_bug_is_not_a_database_stop_and_the_cause_is_found_under_wrappers():
    bug = KeyError("chunk_id")
    try:
        try:
            raise bug
        except KeyError as exc:
            raise RuntimeError("Ray task failed") from exc
    except RuntimeError as wrapped:
        assert cause_of(wrapped) is bug
    assert not database_stopped(bug)
