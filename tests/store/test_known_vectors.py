"""Vector reuse lookups against the real store: texts the collection holds come back with their vectors,
through the md5(embed_text) index, the collection's own first, then other collections' of the same model;
anything else, a table dropped meanwhile and a server that cannot be reached give nothing."""

import logging
import pickle

from jobs.store.datasink import ChunkDatasink
from jobs.store.known_vectors import KnownVectors, embed_key
from tests.store.test_datasink import DIM, _rows, _table, _task
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


def _holding(store, pg_url, collection, model, texts):
    """A collection of `model` whose document `a` holds `texts` (vectors: unit vectors 0, 1, … in order)."""
    coll = store.ensure_collection(collection, model, DIM)
    ChunkDatasink(pg_url, "corpusmill", coll, "w1", label=f"test {collection}", share_text=False).write(
        [_table(_rows("a", len(texts), collection, texts=texts))], _task(0))
    return coll


def test_other_collections_of_the_same_model_lend_what_the_own_lacks(store, pg_url):
    own = _holding(store, pg_url, "kv_own", "m-kv-shared", ["own text"])
    other = _holding(store, pg_url, "kv_other", "m-kv-shared", ["shared text", "own text"])
    stranger = _holding(store, pg_url, "kv_stranger", "m-kv-else", ["stranger text"])
    tables = store.tables_embedded_with("m-kv-shared", DIM)
    assert sorted(tables) == sorted([own.chunk_table, other.chunk_table])  # the model's, not the stranger's
    assert store.tables_embedded_with("m-kv-shared", DIM + 1) == []  # nor another dimension's

    known = KnownVectors(pg_url, "corpusmill", [own.chunk_table] + tables)
    assert known.tables == [own.chunk_table, other.chunk_table]  # each table once, the own first
    texts = ["T › H\n\nown text", "T › H\n\nshared text", "T › H\n\nstranger text"]
    # The own table answers first: "own text" keeps its own vector, not the other collection's.
    assert known.lookup(texts) == {texts[0]: [1, 0, 0, 0], texts[1]: [1, 0, 0, 0]}
    assert KnownVectors(pg_url, "corpusmill", stranger.chunk_table).lookup(texts) == {texts[2]: [1, 0, 0, 0]}

    # Another collection's table gone during a run (`reembed --drop-old`; here renamed, since the
    # all_chunks view depends on it): it is no longer asked, and the own table still answers.
    store.conn.execute(f"ALTER TABLE corpusmill.{other.chunk_table} RENAME TO kv_gone")
    try:
        assert known.lookup(texts) == {texts[0]: [1, 0, 0, 0]}
        assert known.tables == [own.chunk_table]
    finally:
        store.conn.execute(f"ALTER TABLE corpusmill.kv_gone RENAME TO {other.chunk_table}")
        known.close()
