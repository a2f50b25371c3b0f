"""jobs/store/doc_vectors.py: documents' outline vectors beside a chunk table, kept current, and the
`hybrid-doc` ranking, on the embedded PostgreSQL with the packaged MiniLM model."""

import numpy as np
import pytest
from psycopg import sql

from jobs.embed.models import resolve_model
from jobs.search.ranking import search_many
from jobs.store import doc_vectors
from tests.factories import chunk_row, doc_row

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
PAGES = {
    "first": ("collections.First", ["Usage", "Examples"],
              ["Returns the given collection, limited to the first N elements.", "{{ range first 10 .Pages }}"]),
    "server": ("hugo server", ["Options", "Options inherited from parent commands"],
               ["Start the embedded web server and watch files for changes.", "--port int  port on which to listen"]),
    "where": ("collections.Where", ["Arguments", "Operators"],
              ["Returns the given slice, removing elements that do not satisfy the condition.", "eq, ne, lt, le"]),
}


@pytest.fixture(scope="module")
def encode():
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(resolve_model(MODEL).location, device="cpu")
    return lambda texts: model.encode(texts, normalize_embeddings=True, show_progress_bar=False)


def _commit(store, coll, name, title, headings, texts, encode):
    chunks = []
    for i, (heading, text) in enumerate(zip(headings, texts)):
        c = chunk_row(name, i, text, None, coll.name)
        c["heading_path"] = [title, heading]
        chunks.append(c)
    for c, v in zip(chunks, encode([c["text"] for c in chunks])):
        c["embedding"] = v
    store.commit_document(coll, doc_row(name), chunks, "r1")


def _stored(store, coll):
    table = sql.Identifier(store.schema, doc_vectors.table_name(coll.chunk_table))
    return dict(store.conn.execute(sql.SQL("SELECT doc_id, outline_sha256 FROM {}").format(table)).fetchall())


def test_an_outline_is_the_title_then_each_heading_once():
    paths = [["Title"], ["Title", "Usage"], ["Title", "Usage", "Go"], ["Title", "Usage"], ["Title", "Notes"]]
    assert doc_vectors.outline(paths) == "Title\nUsage; Go; Notes"
    assert doc_vectors.outline([["Only a title"]]) == "Only a title"


def test_vectors_are_built_once_kept_current_and_rank_documents(store, encode):
    coll = store.ensure_collection("docvec_t", MODEL, 384)
    for name, (title, headings, texts) in PAGES.items():
        _commit(store, coll, name, title, headings, texts, encode)
    assert store.ensure_doc_vectors(coll, encode) == 3
    assert store.ensure_doc_vectors(coll, encode) == 0  # nothing changed: nothing embedded
    before = _stored(store, coll)

    # A new outline is embedded again; a document gone loses its vector; the others are untouched.
    title, headings, texts = PAGES["where"]
    _commit(store, coll, "where", title, ["Arguments", "Comparison operators"], texts, encode)
    store.delete_document(coll, "server.md")
    assert store.ensure_doc_vectors(coll, encode) == 1
    after = _stored(store, coll)
    assert set(after) == {"first", "where"} and after["first"] == before["first"] != after.get("server")
    assert after["where"] != before["where"]

    # The ranking: documents nearest the question by outline, each as its chunk nearest the question.
    query = "How do I keep only the first elements of a list?"
    (q,) = encode([query])
    chunks, docs = (sql.Identifier(store.schema, t) for t in (coll.chunk_table, doc_vectors.table_name(coll.chunk_table)))
    ranking = doc_vectors.doc_ranking(store.conn, docs, chunks, q, 10)
    outlines = encode([doc_vectors.outline([[PAGES[d][0], h] for h in hs])
                       for d, hs in (("first", PAGES["first"][1]), ("where", ["Arguments", "Comparison operators"]))])
    nearest_doc = ["first", "where"][int(np.argmax(outlines @ q))]
    assert len(ranking) == 2 and ranking[0].startswith(nearest_doc + "-")
    [hits] = search_many(store, coll, [q], 3, queries=[query], mode="hybrid-doc")
    assert hits and {h["chunk_id"] for h in hits} >= {ranking[0]}



def test_a_dropped_space_takes_its_document_vectors_along(store, encode):
    coll = store.ensure_collection("docvec_drop", MODEL, 384)
    _commit(store, coll, "first", *PAGES["first"], encode)
    space = store.begin_space(coll, "other/model", 384)
    assert store.ensure_doc_vectors(space, encode) == 0  # an empty space: its table, no vectors
    name = f"{store.schema}.{doc_vectors.table_name(space.chunk_table)}"
    assert store.conn.execute("SELECT to_regclass(%s)", (name,)).fetchone()[0] is not None
    store.drop_space(space)
    assert store.conn.execute("SELECT to_regclass(%s)", (name,)).fetchone()[0] is None


def test_a_long_build_embeds_in_batches_and_says_how_far_it_is(store, encode, monkeypatch, caplog):
    coll = store.ensure_collection("docvec_progress", MODEL, 384)
    for name, (title, headings, texts) in PAGES.items():
        _commit(store, coll, name, title, headings, texts, encode)
    calls = []
    monkeypatch.setattr(doc_vectors, "ENCODE_BATCH", 2)
    monkeypatch.setattr(doc_vectors, "PROGRESS_SECONDS", 0.0)
    with caplog.at_level("INFO", logger="jobs.store.doc_vectors"):
        assert store.ensure_doc_vectors(coll, lambda texts: calls.append(len(texts)) or encode(texts)) == 3
    assert calls == [2, 1]
    said = [r.getMessage() for r in caplog.records if "outlines embedded" in r.getMessage()]
    assert said == [f"document vectors of {coll.chunk_table}: {n} of 3 outlines embedded" for n in (2, 3)]
    assert _stored(store, coll).keys() == set(PAGES)
