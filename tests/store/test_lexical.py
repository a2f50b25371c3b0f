"""jobs/store/lexical.py: what a chunk table keeps for BM25 (its terms, weights, kept totals and pivot),
against exact BM25 (jobs/search/bm25.py) on the embedded PostgreSQL. The queries through the indexes:
tests/search/test_bm25.py."""

import re
import struct
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from psycopg import sql

from jobs.search import bm25
from jobs.search.ranking import search_many
from jobs.store import arrow_copy, lexical
from jobs.terms import DIMENSION, bm25_weights
from tests.factories import chunk_row, doc_row, unit_vector

DIM = 4
CORPUS = Path(__file__).resolve().parents[1] / "data" / "corpus" / "hugo"
QUERIES = ["how do I configure the server port", "render hooks for links and images", "archetypes content",
           "taxonomy terms template", "module mounts", "the server", "zebra"]


def _paragraphs(n: int) -> list[str]:
    out = []
    for path in sorted(CORPUS.glob("*.md")):
        for block in re.split(r"\n\s*\n", path.read_text(encoding="utf-8")):
            words = block.split()
            if 12 <= len(words) <= 200 and not block.lstrip().startswith(("```", "---", "{{", "|")):
                out.append(" ".join(words))
    return out[:n]


def _rows(name: str, i: int, texts: list[str]) -> list[dict]:
    return [chunk_row(f"{name}-d{i}", s, t, unit_vector(i + s, DIM), name) for s, t in enumerate(texts)]


def _commit(store, coll, name: str, i: int, texts: list[str]):
    doc = doc_row(f"{name}-d{i}")
    store.mark_pending(name, "r1", [doc])
    store.commit_document(coll, doc, _rows(name, i, texts), "r1")
    return doc


def _load(store, name: str, docs: int = 40):
    """`docs` documents of two paragraphs each, committed in one batch (as a writer's flush): the
    table's pivot is their mean length."""
    coll = store.ensure_collection(name, "m", DIM)
    paragraphs = _paragraphs(2 * docs)
    assert len(paragraphs) >= docs
    heads = [doc_row(f"{name}-d{i}") for i in range(docs)]
    store.mark_pending(name, "r1", heads)
    rows = [dict(r, doc_id=h["doc_id"]) for i, h in enumerate(heads)
            for r in _rows(name, i, paragraphs[2 * i:2 * i + 2])]
    store.commit_documents(coll, heads, arrow_copy.rows_table(rows), "r1")
    store.ensure_text_index(coll, after_load=True)  # as a load leaves it
    return coll


def _exact(store, coll, query, limit=10):
    table = sql.Identifier(store.schema, coll.chunk_table)
    return bm25.bm25_scores(store.conn, table, query, limit, bm25.corpus_stats(store.conn, store.schema, coll.chunk_table))


def _indexed(store, coll, query, limit=10):
    with store.conn.transaction():
        return bm25.scores(store.conn, store.schema, coll.chunk_table, query, limit)


def _assert_same_ranking(exact, indexed):
    assert [c for c, _ in indexed] == [c for c, _ in exact] or (
        # Equal exact scores may come in either order; their scores must still match one to one.
        sorted(round(s, 3) for _, s in indexed) == sorted(round(s, 3) for _, s in exact))
    for (_, e), (_, g) in zip(exact, indexed):
        assert g == pytest.approx(e, rel=1e-4)


def test_kept_totals_follow_adds_updates_deletes_and_reloads(store):
    coll = _load(store, "lex_totals", docs=12)
    table = sql.Identifier(store.schema, coll.chunk_table)

    def agree():
        n, mean = lexical.totals(store.conn, store.schema, coll.chunk_table)
        exact_n, exact_mean = store.conn.execute(sql.SQL("SELECT count(*), coalesce(avg(lex_length), 1) FROM {} "
                                                         "WHERE NOT omitted").format(table)).fetchone()
        assert (n, mean) == (exact_n, pytest.approx(float(exact_mean)))
        return n

    assert agree() == 24
    _commit(store, coll, "lex_totals", 3, ["one short text now", "and another", "and a third about servers"])  # update
    assert agree() == 25
    store.delete_document(coll, "lex_totals-d5.md")
    assert agree() == 23
    lexical.fold_totals(store.conn, store.schema, coll.chunk_table)
    assert store.conn.execute(sql.SQL("SELECT count(*) FROM {} WHERE chunk_table = %s").format(
        sql.Identifier(store.schema, "lexical_totals")), (coll.chunk_table,)).fetchone()[0] == 1
    assert agree() == 23
    store.conn.execute(sql.SQL("TRUNCATE {}").format(table))
    assert agree() == 0


def test_the_first_commit_sets_the_pivot_and_later_ones_keep_it(store):
    # A first commit of documents without chunks (empty pages) has no length to set it from: it sets none.
    empty = store.ensure_collection("lex_pivot", "m", DIM)
    _commit(store, empty, "lex_pivot", 99, [])
    assert lexical.pivot(store.conn, store.schema, empty.chunk_table) is None
    coll = _load(store, "lex_pivot", docs=10)
    (mean,) = store.conn.execute(sql.SQL("SELECT avg(lex_length) FROM {}").format(
        sql.Identifier(store.schema, coll.chunk_table))).fetchone()
    assert lexical.pivot(store.conn, store.schema, coll.chunk_table) == pytest.approx(float(mean), abs=1e-3)
    long_text = " ".join(_paragraphs(60)[20:60])
    for i in range(10, 16):
        _commit(store, coll, "lex_pivot", i, [long_text + f" variant{i}"])
    store.ensure_text_index(coll, after_load=True)
    assert lexical.pivot(store.conn, store.schema, coll.chunk_table) == pytest.approx(float(mean), abs=1e-3)
    for query in QUERIES[:3]:  # exact BM25 normalises by the same pivot
        _assert_same_ranking(_exact(store, coll, query), _indexed(store, coll, query))


def test_the_chunk_table_computes_nothing_per_row(store):
    """The write path issues no per-row text function: read from the table's definition, not timed."""
    coll = _load(store, "lex_plain", docs=4)
    oid = store.conn.execute("SELECT to_regclass(%s)::oid", (f"{store.schema}.{coll.chunk_table}",)).fetchone()[0]
    generated = store.conn.execute("SELECT attname FROM pg_attribute WHERE attrelid = %s AND attnum > 0 "
                                   "AND attgenerated <> ''", (oid,)).fetchall()
    defaults = store.conn.execute("SELECT pg_get_expr(adbin, adrelid) FROM pg_attrdef WHERE adrelid = %s",
                                  (oid,)).fetchall()
    row_triggers = store.conn.execute("SELECT tgname FROM pg_trigger WHERE tgrelid = %s AND NOT tgisinternal "
                                      "AND tgtype & 1 = 1", (oid,)).fetchall()  # bit 0: FOR EACH ROW
    indexes = [r[0] for r in store.conn.execute("SELECT pg_get_indexdef(indexrelid) FROM pg_index WHERE indrelid = %s",
                                                (oid,))]
    assert generated == [] and defaults == [] and row_triggers == []
    assert not [d for d in indexes if "tsvector" in d or "bm25" in d]
    assert any("gin (lex_terms)" in d for d in indexes) and any("lex sparsevec_ip_ops" in d for d in indexes)


def test_a_chunk_of_more_than_a_thousand_terms_keeps_its_thousand_heaviest_and_is_indexed(store):
    coll = store.ensure_collection("lex_wide", "m", DIM)
    wide = " ".join(f"term{i:04d}" for i in range(1200)) + " term0007 term0007"  # 1,200 terms, one thrice
    _commit(store, coll, "lex_wide", 0, [wide])
    _commit(store, coll, "lex_wide", 1, ["a short chunk about term0007 and term1199"])
    store.ensure_text_index(coll)  # the HNSW index takes at most 1,000 non-zero elements a vector
    (stored,) = store.conn.execute(sql.SQL("SELECT lex::text FROM {} WHERE doc_id = 'lex_wide-d0'").format(
        sql.Identifier(store.schema, coll.chunk_table))).fetchone()
    assert stored.count(":") == 1000
    [hits] = search_many(store, coll, [unit_vector(0, DIM)], 2, queries=["term0007"], mode="text")
    assert [h["chunk_id"] for h in hits] == ["lex_wide-d1-0", "lex_wide-d0-0"]  # the short chunk first, as BM25 has it


def _int4_array_send(values: list[int]) -> bytes:
    """PostgreSQL's array_send of an int4[], written out field by field (the reference for the numpy build)."""
    if not values:
        return struct.pack(">iii", 0, 0, 23)
    return struct.pack(">iiiii", 1, 0, 23, len(values), 1) + b"".join(struct.pack(">ii", 4, v) for v in values)


def test_term_lists_and_weights_are_built_as_postgresql_and_pgvector_read_them():
    many = list(range(1, lexical.MAX_DIMS + 301))  # more terms than an HNSW index takes
    rows = pa.table({"lex_terms": pa.array([[3, 9], [], [5], many], pa.list_(pa.int32())),
                     "lex_tfs": pa.array([[1, 4], [], [2], [1 + i % 7 for i in range(len(many))]], pa.list_(pa.int32())),
                     "lex_length": pa.array([2, 0, 1, len(many)], pa.int32())})
    assert lexical.int4_arrays(rows.column("lex_terms")) == [_int4_array_send(v) for v in
                                                                          rows.column("lex_terms").to_pylist()]
    sent = lexical.sparse_weights(rows, 30.0)
    for terms, tfs, length, got in zip(*(rows.column(c).to_pylist() for c in lexical.LEX_COLUMNS), sent):
        w = np.asarray(bm25_weights(np.array(tfs), length, 30.0), dtype=np.float32)
        keep = sorted(np.lexsort((terms, -w.astype(np.float64)))[:lexical.MAX_DIMS]) if terms else []
        assert got == (struct.pack(">iii", DIMENSION, len(keep), 0) + b"".join(struct.pack(">i", terms[i] - 1) for i in keep)
                       + b"".join(struct.pack(">f", w[i]) for i in keep))
    # A slice (offsets that do not start at 0: a commit's share of a part) encodes only its own rows.
    assert lexical.int4_arrays(rows.column("lex_terms").slice(2))[0] == _int4_array_send([5])
    # Rows without terms (a chunk of stop words only) first or last in a batch are rows like any other.
    edges = pa.table({"lex_terms": pa.array([[], [3, 9], [2, 4], []], pa.list_(pa.int32())),
                      "lex_tfs": pa.array([[], [1, 4], [1, 1], []], pa.list_(pa.int32())),
                      "lex_length": pa.array([0, 2, 2, 0], pa.int32())})
    empty = struct.pack(">iii", DIMENSION, 0, 0)
    weights = lexical.sparse_weights(edges, 30.0)
    assert weights[0] == weights[3] == empty and weights[1][4:8] == struct.pack(">i", 2)
