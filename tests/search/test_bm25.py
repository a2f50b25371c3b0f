"""jobs/search/bm25.py: a query's BM25 through the sparse-weights HNSW index and the GIN index, against exact
BM25 in SQL, and its document frequencies, on the embedded PostgreSQL (the tables as the write side keeps
them: tests/store/test_lexical.py)."""

import pytest
from psycopg import sql

from jobs.search import bm25
from jobs.search.ranking import search_many
from jobs.store import lexical
from jobs.terms import query_terms
from tests.factories import unit_vector
from tests.store.test_lexical import DIM, QUERIES, _assert_same_ranking, _commit, _exact, _indexed, _load


@pytest.mark.parametrize("through", ["gin", "hnsw"])
def test_indexed_bm25_scores_what_exact_bm25_scores(store, monkeypatch, through):
    coll = _load(store, f"lex_{through}")
    if through == "hnsw":
        monkeypatch.setattr(bm25, "RARE_DF", 0)  # every word through the sparse HNSW index
    for query in QUERIES:
        exact, indexed = _exact(store, coll, query), _indexed(store, coll, query)
        assert bool(exact) == (query != "zebra")
        _assert_same_ranking(exact, indexed)


def test_common_words_take_postgres_statistics_and_rare_ones_a_count(store, monkeypatch):
    coll = _load(store, "lex_df", docs=20)
    store.conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(store.schema, coll.chunk_table)))
    n, _ = lexical.totals(store.conn, store.schema, coll.chunk_table)
    words = query_terms("server hugo")
    counted = bm25.document_frequencies(store.conn, store.schema, coll.chunk_table, words, n)
    monkeypatch.setattr(bm25, "RARE_DF", 0)  # everything counts as common: ANALYZE's share of rows
    estimated = bm25.document_frequencies(store.conn, store.schema, coll.chunk_table, words, n)
    for word in words:  # the sample is the whole table here, so the estimate is the count
        assert estimated[word] == counted[word] > 0


def test_a_query_word_in_another_inflection_finds_its_chunk(store):
    coll = _load(store, "lex_inflect", docs=6)
    _commit(store, coll, "lex_inflect", 6, ["Rotating the signing keys weekly keeps tokens short-lived."])
    store.ensure_text_index(coll, after_load=True)
    for query in ("rotate key", "ROTATED KEYS", "the rotation of a key"):
        [hits] = search_many(store, coll, [unit_vector(0, DIM)], 1, queries=[query], mode="text")
        assert [h["chunk_id"] for h in hits] == ["lex_inflect-d6-0"], query
