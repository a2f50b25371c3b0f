"""Text shared across documents is stored once, and never lost when the document holding it goes."""

from psycopg import sql

from jobs.chunks.ids import sha256_text
from jobs.store import shared_text
from tests.factories import chunk_row, doc_row, unit_vector

NAME = "shared_t"
ONE_COPY = {"copies": 1, "texts": 1, "documents": 1, "whole_copies": 0, "whole_copy_paths": []}


def _chunks(doc_id, texts, collection=NAME):
    return [chunk_row(doc_id, i, t, unit_vector(i, 4), collection) for i, t in enumerate(texts)]


def _stored(store, coll):
    return store.conn.execute(
        f"SELECT doc_id, text FROM corpusmill.{coll.chunk_table} ORDER BY doc_id, seq").fetchall()


def _status(store, doc_id, collection=NAME):
    return store.conn.execute("SELECT status, chunk_count FROM corpusmill.documents WHERE collection = %s "
                              "AND doc_id = %s", (collection, doc_id)).fetchone()


def test_a_text_another_document_holds_is_recorded_not_stored_twice(store):
    coll = store.ensure_collection(NAME, "m", 4)
    first = store.commit_document(coll, doc_row("a"), _chunks("a", ["intro of a", "--clock string  set the clock"]), "r1")
    second = store.commit_document(coll, doc_row("b"), _chunks("b", ["intro of b", "--clock string  set the clock"]), "r1")
    assert (first.vectors, first.shared) == (2, 0)
    assert (second.vectors, second.shared) == (1, 1)
    assert _stored(store, coll) == [("a", "intro of a"), ("a", "--clock string  set the clock"), ("b", "intro of b")]
    assert _status(store, "b") == ("done", 1)
    assert store.shared_text_counts(coll) == ONE_COPY
    # committing the copy again (a rerun) replaces its record, never adds a second one
    store.commit_document(coll, doc_row("b"), _chunks("b", ["intro of b", "--clock string  set the clock"]), "r2")
    assert store.shared_text_counts(coll) == ONE_COPY
    # the same text twice inside one document is the chunker's business: both kept
    store.commit_document(coll, doc_row("c"), _chunks("c", ["twice here", "twice here"]), "r1")
    assert [t for d, t in _stored(store, coll) if d == "c"] == ["twice here", "twice here"]
    # a page that is all copy (included under another path) has nothing of its own: counted, named
    store.commit_document(coll, doc_row("d"), _chunks("d", ["intro of a"]), "r1")
    assert store.shared_text_counts(coll)["whole_copy_paths"] == ["d.md"]


def test_when_the_holder_drops_the_text_the_copies_are_re_planned(store):
    coll = store.ensure_collection(NAME + "_r", "m", 4)
    shared = "a long C# host sample, the same on three pages"
    for doc in "abc":
        store.commit_document(coll, doc_row(doc), _chunks(doc, [f"page {doc}", shared], coll.name), "r1")
    assert [d for d, t in _stored(store, coll) if t == shared] == ["a"]
    # a's new version keeps the text: nothing to re-plan
    assert store.commit_document(coll, doc_row("a", "sha2"), _chunks("a", ["page a, edited", shared], coll.name),
                                 "r2").released == 0
    # a's next version drops it and no one else holds it: b and c must be re-chunked to hold it
    assert store.commit_document(coll, doc_row("a", "sha3"), _chunks("a", ["page a only"], coll.name), "r3").released == 2
    assert _status(store, "b", coll.name)[0] == "pending" and _status(store, "c", coll.name)[0] == "pending"
    assert store.stored_documents(coll.name)["b.md"].status == "pending"  # the next plan retries it
    # the next run re-chunks b first: b holds the text now, c records its copy again
    store.commit_document(coll, doc_row("b"), _chunks("b", ["page b", shared], coll.name), "r4")
    store.commit_document(coll, doc_row("c"), _chunks("c", ["page c", shared], coll.name), "r4")
    assert [d for d, t in _stored(store, coll) if t == shared] == ["b"]
    assert store.shared_text_counts(coll) == ONE_COPY


def test_deleting_the_holder_re_plans_the_copies(store):
    coll = store.ensure_collection(NAME + "_d", "m", 4)
    store.commit_document(coll, doc_row("a"), _chunks("a", ["shared block of text"], coll.name), "r1")
    store.commit_document(coll, doc_row("b"), _chunks("b", ["own text", "shared block of text"], coll.name), "r1")
    assert store.delete_document(coll, "a.md") == 1
    assert _status(store, "b", coll.name)[0] == "pending"
    assert _stored(store, coll) == [("b", "own text")]


def test_each_stores_every_copy(store):
    coll = store.ensure_collection(NAME + "_e", "m", 4)
    for doc in "ab":
        assert store.commit_document(coll, doc_row(doc), _chunks(doc, ["same text"], coll.name), "r1",
                                     share_text=False).vectors == 1
    assert len(_stored(store, coll)) == 2 and store.shared_text_counts(coll)["copies"] == 0


def test_the_holder_lookup_goes_through_an_index(store):
    coll = store.ensure_collection(NAME + "_i", "m", 4)
    index = store.table_index(coll.chunk_table, "btree", "text_sha256")
    assert index is not None
    # Enough rows that a sequential scan would cost more, as in any real collection; then the plan of
    # the very statement each commit runs.
    for d in range(40):
        store.commit_document(coll, doc_row(f"p{d}"), _chunks(f"p{d}", [f"page {d} part {i}" for i in range(50)],
                                                               coll.name), "r1")
    store.conn.execute(f"ANALYZE corpusmill.{coll.chunk_table}")
    hashes = [sha256_text("page 3 part 7"), sha256_text("not stored")]
    held = shared_text.held_query(store._t(coll.chunk_table))
    custom = "\n".join(r[0] for r in store.conn.execute(sql.SQL("EXPLAIN ") + held,
                                                          (shared_text.hash_list(hashes), ["p9"])))
    # And the generic plan, which the statement gets once psycopg prepares it (after its fifth run): the
    # hashes then a parameter that string_to_array splits in the server.
    numbered = held.as_string(store.conn).replace("%s", "$1", 1).replace("%s", "$2", 1)
    generic = "\n".join(r[0] for r in store.conn.execute("EXPLAIN (GENERIC_PLAN) " + numbered))
    for plan in (custom, generic):
        assert index in plan and "Seq Scan" not in plan, plan
