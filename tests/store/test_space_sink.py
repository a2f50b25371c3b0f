"""The re-embed's writers against the real store: a document split across write tasks lands whole in the
new space, one the database rejects stays out (so the space is incomplete and the collection does
not switch), and the active space is never touched."""

import numpy as np
import pyarrow as pa

from jobs.reembed import SPACE_SCHEMA
from jobs.store.space_sink import SpaceDatasink
from tests.store.test_datasink import _done, _rows, _stored, _task
from tests.store.test_spaces import _active


def _space_table(rows) -> pa.Table:
    return pa.Table.from_pylist([{k: r.get(k) for k in SPACE_SCHEMA.names} for r in rows], schema=SPACE_SCHEMA)


def _renumbered(rows):
    """Rows as the read tasks give them: numbered within their document by `pos`, seq left as stored."""
    return [dict(r, pos=i, doc_rows=len(rows), seq=r["seq"] * 10) for i, r in enumerate(rows)]


def test_space_writers_commit_split_documents_whole_and_leave_a_rejected_one_out(store, pg_url):
    a, b, bad = (_renumbered(_rows(d, n, "sp_sink")) for d, n in (("a", 3), ("b", 2), ("bad", 1)))
    active = _active(store, pg_url, "sp_sink", [_rows(d, n, "sp_sink") for d, n in (("a", 3), ("b", 2), ("bad", 1))])
    before = _stored(store, active)
    space = store.begin_space(active, "other-model", 4)
    sink = SpaceDatasink(pg_url, "corpusmill", space, label="test sp_sink")
    sink.on_write_start()
    bad[0]["embedding"] = np.array([np.nan, 0, 0, 0], dtype=np.float32)  # pgvector refuses NaN
    b[1]["doc_stats"] = '{"vectors_reused": 1}'  # the embedder encoded b's second text once for two rows
    # Task 0 has b whole, the rejected document and a's first two rows; task 1 a's last row, a repeat with it.
    first = sink.write([_space_table(b + bad + a[:2])], _task(0))
    second = sink.write([_space_table([a[1], a[2]])], _task(1))
    assert (first.docs_done, first.docs_failed, first.staged, second.staged) == (1, 1, 1, 1)
    assert first.failures[0]["source_path"] == "bad.md" and first.failures[0]["stage"] == "load"
    sink.on_write_complete(_done(first, second))
    assert sink.stats.docs_done == 2 and sink.stats.duplicate_rows == 1 and sink.stats.reused == 1
    assert [(d, s) for d, s, _ in _stored(store, space)] == [("a", 0), ("a", 10), ("a", 20), ("b", 0), ("b", 10)]
    assert store.missing_count(active, space) == 1  # `bad`: the re-embed must not switch
    assert _stored(store, active) == before  # the active space and its checkpoint rows are untouched
    assert store.status("sp_sink")["documents"]["failed"] == 0
    assert store.conn.execute("SELECT count(*) FROM corpusmill.staged_rows WHERE collection = 'sp_sink'").fetchone()[0] == 0


def test_a_space_document_still_missing_rows_at_the_end_is_counted_and_left_out(store, pg_url):
    active = _active(store, pg_url, "sp_part", [_rows("a", 3, "sp_part")])
    space = store.begin_space(active, "other-model", 4)
    sink = SpaceDatasink(pg_url, "corpusmill", space, label="test sp_part")
    part = sink.write([_space_table(_renumbered(_rows("a", 3, "sp_part"))[:2])], _task(0))
    sink.on_write_complete(_done(part))
    assert [f["error_class"] for f in sink.stats.failures] == ["IncompleteDocument"]
    assert "missing pos [2]" in sink.stats.failures[0]["message"]
    assert _stored(store, space) == [] and store.missing_count(active, space) == 1
