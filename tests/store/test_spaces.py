"""Embedding spaces on the real store: what a re-embed still owes, cut into ranges by the server, and the
stored rows numbered within their document."""

from jobs.store.datasink import ChunkDatasink
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
    assert rows[0]["embed_text"] == "T › H\n\na text 0" and "embedding" not in rows[0]
    assert [r["doc_id"] for r in store.space_rows(active, space, "b", "b")] == ["b"]
