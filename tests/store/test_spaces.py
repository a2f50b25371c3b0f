"""Embedding spaces on the real store: what a re-embed still owes, cut into ranges by the server, the
stored rows numbered within their document, and which space an ingest after a re-embed embeds with."""

import pytest

from jobs.config import JobConfig
from jobs.store.datasink import ChunkDatasink
from jobs.store.spaces import CollectionMismatch, space_for_ingest
from tests.store.test_datasink import DIM, _rows, _table, _task


def _active(store, pg_url, collection, docs):
    coll = store.ensure_collection(collection, "m", DIM)
    sink = ChunkDatasink(pg_url, "corpusmill", coll, "w1", label=f"test {collection}", share_text=False)
    sink.write([_table([r for d in docs for r in d])], _task(0))
    return coll


def test_missing_ranges_cover_exactly_the_documents_the_space_lacks(store, pg_url):
    docs = [_rows(f"d{i}", 2, "sp_ranges") for i in range(7)]
    active = _active(store, pg_url, "sp_ranges", docs)
    space = store.begin_space(active, "other-model", DIM)
    assert store.space_size(space) == (0, 0)
    assert store.missing_ranges(active, space, 3) == [("d0", "d2", 3), ("d3", "d5", 3), ("d6", "d6", 1)]
    done = _table(docs[1] + docs[4])
    store.load_space_documents(space, ["d1", "d4"], done)
    assert store.space_size(space) == (2, 4)
    assert store.missing_ranges(active, space, 2) == [("d0", "d2", 2), ("d3", "d5", 2), ("d6", "d6", 1)]
    assert store.missing_count(active, space) == 5
    assert store.space_holds(space, "d1") and not store.space_holds(space, "d0")
    # Loading a document again replaces its rows rather than adding to them.
    store.load_space_documents(space, ["d1"], _table(docs[1]))
    assert store.space_size(space) == (2, 4)


def test_space_rows_number_a_documents_stored_rows_without_its_gaps(store, pg_url):
    a = _rows("a", 4, "sp_rows")
    a[1]["omitted"] = True  # an omitted chunk is never stored: seq 1 is a gap
    active = _active(store, pg_url, "sp_rows", [a, _rows("b", 1, "sp_rows")])
    space = store.begin_space(active, "other-model", DIM)
    rows = store.space_rows(active, space, "a", "b")
    assert [(r["doc_id"], r["seq"], r["pos"], r["doc_rows"]) for r in rows] == [
        ("a", 0, 0, 3), ("a", 2, 1, 3), ("a", 3, 2, 3), ("b", 0, 0, 1)]
    assert rows[0]["embed_text"] == "T › H\n\na text 0" and rows[0]["embedding"] is None
    assert [r["doc_id"] for r in store.space_rows(active, space, "b", "b")] == ["b"]


def test_going_back_to_a_retired_space_reads_the_vectors_of_unchanged_texts(store, pg_url):
    docs = [_rows(d, 2, "sp_back") for d in ("a", "b")]
    first = _active(store, pg_url, "sp_back", docs)
    other = store.begin_space(first, "other-model", DIM)
    store.load_space_documents(other, ["a", "b"], _table([r for d in docs for r in d]))
    store.switch_space(first, other, None, None)
    store.conn.execute(f"UPDATE corpusmill.{other.chunk_table} SET embed_text = 'changed' WHERE chunk_id = 'b-1'")

    back = store.begin_space(other, "m", DIM)  # the retired first space, rebuilt
    assert back.chunk_table == first.chunk_table and store.space_size(back) == (0, 0)
    assert store.has_reuse(back) and store.reusable(other, back) == 3
    rows = store.space_rows(other, back, "a", "b", reuse=store.has_reuse(back))
    reused = {r["chunk_id"]: r["embedding"] for r in rows}
    assert reused["b-1"] is None  # its text changed: to be embedded again
    assert [list(reused[c]) for c in ("a-0", "a-1", "b-0")] == [[1, 0, 0, 0], [0, 1, 0, 0], [1, 0, 0, 0]]
    assert {r["embedding_model"] for r in rows if r["embedding"] is not None} == {"m"}
    # `a` changed nowhere: copied on the server, its vectors and all; `b` waits for the encoder.
    assert store.copy_reusable_documents(other, back) == (1, 2)
    assert store.conn.execute(f"SELECT chunk_id, embedding_model, embedding::real[] FROM corpusmill.{back.chunk_table} "
                              "ORDER BY 1").fetchall() == [("a-0", "m", [1, 0, 0, 0]), ("a-1", "m", [0, 1, 0, 0])]
    assert store.missing_count(other, back) == 1 and store.reusable(other, back) == 1
    assert store.copy_reusable_documents(other, back) == (0, 0)
    store.drop_reuse(back)
    assert not store.has_reuse(back) and store.reusable(other, back) == 0


def _switched(store, collection):
    """A collection first embedded with "m", then switched by a reembed to "other-model" ("m" retired)."""
    first = store.ensure_collection(collection, "m", DIM)
    other = store.begin_space(first, "other-model", DIM)
    store.switch_space(first, other, None, None)
    return other


def test_an_ingest_after_a_reembed_embeds_with_the_active_space(store, caplog):
    _switched(store, "sp_ingest")
    written_before = JobConfig.model_validate({"collection": "sp_ingest", "embedding": {"model": "m"}})
    with caplog.at_level("INFO", logger="jobs.store.spaces"):
        cfg = space_for_ingest(store, written_before)
    assert cfg.embedding.reference == "other-model" and cfg.collection == "sp_ingest"
    assert cfg.fingerprint() != written_before.fingerprint()  # the fingerprint switch_space moved documents to
    (line,) = [r.getMessage() for r in caplog.records if r.name == "jobs.store.spaces"]
    assert "embeds with other-model" in line and "the config's earlier embedding.model m" in line

    unset = JobConfig.model_validate({"collection": "sp_ingest"})  # no embedding.model: the active one
    assert space_for_ingest(store, unset).embedding.reference == "other-model"
    current = JobConfig.model_validate({"collection": "sp_ingest", "embedding": {"model": "other-model"}})
    assert space_for_ingest(store, current) is current
    new = JobConfig.model_validate({"collection": "sp_new", "embedding": {"model": "m"}})
    assert space_for_ingest(store, new) is new  # no collection yet: the config's model makes it


def test_an_ingest_with_a_model_the_collection_never_had_is_refused(store):
    _switched(store, "sp_refused")
    cfg = JobConfig.model_validate({"collection": "sp_refused", "embedding": {"model": "never-had"}})
    with pytest.raises(CollectionMismatch) as err:
        space_for_ingest(store, cfg)
    message = str(err.value)
    assert "embeds with other-model" in message and "never-had" in message
    assert "set embedding.model: other-model" in message
    assert "`corpusmill reembed --collection sp_refused --model never-had`" in message


def test_a_resumed_reembed_drops_what_an_ingest_changed_or_deleted_since_its_first_attempt(store, pg_url):
    """A reembed killed after some documents, an ingest that updates one of them and deletes another, then
    the reembed again: those two leave the new space (the changed one to be embedded again), the
    unchanged one stays, as copied."""
    docs = [_rows(f"d{i}", 2, "sp_resume") for i in range(4)]
    active = _active(store, pg_url, "sp_resume", docs)
    space = store.begin_space(active, "other-model", DIM)
    for doc in ("d0", "d1", "d2"):  # as jobs.reembed.fill_space copies them
        store.load_space_document(space, doc, [dict(c, embedding=[0.5] * DIM, embedding_model="other-model")
                                               for c in store.chunks_of(active, [doc])])
    sink = ChunkDatasink(pg_url, "corpusmill", active, "w2", label="test sp_resume", share_text=False)
    sink.write([_table(_rows("d1", 3, "sp_resume", texts=["new", "text", "here"], run_id="w2"))], _task(1))
    store.delete_document(active, "d2.md")

    resumed = store.begin_space(active, "other-model", DIM)
    assert resumed == space and store.space_size(space) == (1, 2)  # d0 only
    assert store.docs_missing_from(active, space) == ["d1", "d3"]


def test_drop_old_also_drops_a_space_a_killed_reembed_left_building(store, pg_url):
    docs = [_rows(f"d{i}", 1, "sp_drop") for i in range(2)]
    active = _active(store, pg_url, "sp_drop", docs)
    abandoned = store.begin_space(active, "abandoned-model", DIM)  # a reembed killed, never run again
    new = store.begin_space(active, "other-model", DIM)
    store.load_space_documents(new, ["d0", "d1"], _table([r for d in docs for r in d]))
    store.switch_space(active, new, None, None)
    assert sorted(store.drop_retired("sp_drop")) == sorted([active.chunk_table, abandoned.chunk_table])
    left = store.conn.execute("SELECT chunk_table, status FROM corpusmill.embedding_spaces WHERE collection = 'sp_drop'")
    assert left.fetchall() == [(new.chunk_table, "active")]
