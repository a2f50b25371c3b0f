"""Vector reuse lookups against the real store: texts the collection holds come back with their vectors,
through the md5(embed_text) index; anything else, and a server that cannot be reached, gives nothing."""

import logging
import pickle

from jobs.store.known_vectors import KnownVectors, embed_key
from tests.store.test_datasink import DIM, _rows
from tests.store.test_spaces import _active


def test_known_texts_come_back_with_their_vectors_and_others_do_not(store, pg_url):
    rows = _rows("a", 3, "kv_lookup")
    coll = _active(store, pg_url, "kv_lookup", [rows])
    known = pickle.loads(pickle.dumps(KnownVectors(pg_url, "corpusmill", coll.chunk_table)))  # as actors get it
    texts = [rows[2]["embed_text"], "never embedded", rows[0]["embed_text"], rows[0]["embed_text"]]
    found = known.lookup(texts)
    assert found == {rows[2]["embed_text"]: [0, 0, 1, 0], rows[0]["embed_text"]: [1, 0, 0, 0]}
    assert len(next(iter(found.values()))) == DIM
    assert known.lookup([]) == {}
    known.close()


def test_the_lookup_uses_the_md5_index(store, pg_url):
    coll = _active(store, pg_url, "kv_index", [_rows("a", 2, "kv_index")])
    store.conn.execute("SET enable_seqscan = off")
    plan = "\n".join(r[0] for r in store.conn.execute(
        f"EXPLAIN SELECT embed_text FROM corpusmill.{coll.chunk_table} WHERE md5(embed_text) = ANY(%s)",
        ([embed_key("x")],)))
    store.conn.execute("RESET enable_seqscan")
    assert "_embed_idx" in plan, plan
    assert embed_key("T › H") == store.conn.execute("SELECT md5('T › H')").fetchone()[0]


def test_an_unreachable_server_costs_only_the_reuse(caplog):
    known = KnownVectors("postgresql://nobody@127.0.0.1:1/none?connect_timeout=2", "corpusmill", "chunks_x")
    with caplog.at_level(logging.WARNING):
        assert known.lookup(["a text"]) == {}
    assert "vector reuse skipped" in caplog.text
