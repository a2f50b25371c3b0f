"""A collection's chunks ranked for queries, in each search mode: `vector` by cosine through the HNSW
index (jobs/search/vector_index.py), `text` by BM25 over the chunks' terms (jobs/search/bm25.py), `hybrid`
both fused, `hybrid-doc` those two and the documents' outline vectors (jobs/store/doc_vectors.py) fused.

A small embedder blurs identifiers: an option name, a type, a version, a product word that only a
few pages carry. BM25 finds them. `hybrid` fuses the BM25 ranking with the vector ranking by reciprocal
rank fusion (Cormack et al.; its constant below). The vectors stay where they were: a plain
`ORDER BY embedding <=> …` query still works on the same table.

The functions that take a store (search_many, search) are the read side's entry points over a PgStore:
the store itself writes and keeps the tables, and never imports this package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from psycopg import sql

from jobs.search import bm25, hits, vector_index
from jobs.search import filters as filters_
from jobs.store import doc_vectors

if TYPE_CHECKING:  # annotations only: the store is handed in
    from jobs.store.pgvector import PgStore
    from jobs.store.spaces import Collection

MODES = ("vector", "text", "hybrid", "hybrid-doc")  # hybrid-doc: jobs/store/doc_vectors.py
# Reciprocal rank fusion's constant, 1 / (RRF_K + rank). The paper's 60 suits many rankers; with two,
# a small one lets each ranking's first hits lead. Measured on three dev sets (page hit@5, default
# chunks): k = 60 -> openshift 0.912, hugo described 0.513, XQuAD 0.992; k = 1..5 -> 0.952-0.957,
# 0.543-0.557, 0.996-0.999 (a plateau; every set moves the same way).
RRF_K = 2
DEPTH = 50  # candidates taken from each ranking before fusing (at least k)
# HNSW candidates of a fused mode's vector list: its 50th hit still moves fused ranks, and an index
# asked for 100 candidates loses some of that tail. At 200, hybrid search through the index scored
# what an exact scan scores on every dev set at @5 (`corpusmill eval` with and without --exact on
# make eval's collections: openshift-docs page @5 0.966 at 100, 0.969 at 200 and exact; hugo,
# PowerShell and XQuAD equal to exact at both).
FUSED_EF_SEARCH = 4 * DEPTH


def vector_scores(conn, table: sql.Composed, vector, limit: int, index: tuple[str, int] = ("vector", 0),
                  where: sql.Composable | None = None) -> list[tuple[str, float]]:
    """(chunk id, cosine similarity), best first, through the table's HNSW index of `index` (its kind and
    the dimension: jobs/store/index_kinds.py), of the chunks `where` admits."""
    kind, dimension = index
    stmt = vector_index.nearest(kind, dimension, table, sql.SQL("chunk_id"), where)
    return [(r[0], float(r[1])) for r in conn.execute(stmt, {"v": np.asarray(vector, dtype=np.float32), "lim": limit,
                                                             "depth": vector_index.depth(kind, limit)})]


def _normalized(scored: list[tuple[str, float]]) -> dict[str, float]:
    """Scores of one ranking scaled to 0..1 between its last and first (min-max over the list)."""
    if not scored:
        return {}
    hi, lo = scored[0][1], scored[-1][1]
    return {c: (s - lo) / (hi - lo) if hi > lo else 1.0 for c, s in scored}


def _ranks(ranking: list[str], scored: list[tuple[str, float]] | None) -> dict[str, int]:
    """chunk id -> rank (1 first); chunks of one score share the best of their ranks (1, 2, 2, 4)."""
    if scored is None:
        return {chunk: rank for rank, chunk in enumerate(ranking, 1)}
    out: dict[str, int] = {}
    rank, last = 0, None
    for position, (chunk, score) in enumerate(scored, 1):
        value = round(score, 9)  # the same sum in another order may differ in the last bits
        if value != last:
            rank, last = position, value
        out[chunk] = rank
    return out


def fuse(rankings: list[list[str]], k: int, scored: list[list[tuple[str, float]]] | None = None
         ) -> list[tuple[str, float]]:
    """Reciprocal rank fusion: each chunk scores the sum of 1 / (RRF_K + rank) over the rankings it is in.

    `scored`: the first rankings with their scores (BM25, cosine). Chunks a ranking scores the same
    share a rank. BM25 gives many exact ties (on hugo described, 128 of 680 questions have some in
    their first ten, short pages of the same words), and
    ranking them one after the other by chunk id let the ids decide, and ids hash the collection's
    name. Equal sums are common too: with two
    rankings, a chunk first by one and third by the other ties with one third and first, and 8 to 16 %
    of the dev sets' questions have their top two tied. A tie is settled by the sum of each ranking's
    min-max normalized score (CombSUM): the chunk with the stronger evidence leads, not whichever chunk
    id sorts first. Neither ranking is preferred: BM25 leads on some corpora, vectors on others
    (ties given to either ranking won on some dev sets, lost on others). Without scores, ties go by chunk id."""
    scores: dict[str, float] = {}
    for i, ranking in enumerate(rankings):
        for chunk, rank in _ranks(ranking, scored[i] if scored and i < len(scored) else None).items():
            scores[chunk] = scores.get(chunk, 0.0) + 1.0 / (RRF_K + rank)
    evidence: dict[str, float] = {}
    for ranked in scored or []:
        for chunk, value in _normalized(ranked).items():
            evidence[chunk] = evidence.get(chunk, 0.0) + value
    # Rounded: the same reciprocal ranks summed in another order may differ in the last bit.
    return sorted(scores.items(), key=lambda item: (-round(item[1], 12), -evidence.get(item[0], 0.0), item[0]))[:k]


def ranked_search(conn, table: sql.Composed, mode: str, query: str, vector, k: int, text_ranking,
                  docs: sql.Composed | None = None, index: tuple[str, int] = ("vector", 0),
                  where: sql.Composable | None = None) -> list[dict]:
    """Top-k chunks for one query in `text`, `hybrid` or `hybrid-doc` mode (the caller's transaction sets
    ef_search; `text_ranking(query, limit)`: the BM25 ranking, exact or through the indexes, of the chunks
    `where` admits; `docs`: the document-vector table hybrid-doc ranks by). `score`: the ranks fused by RRF,
    which orders the hits; `bm25`: the chunk's BM25 score when it was among the BM25 candidates, and
    the hit's fields (jobs/search/hits.py) with its cosine."""
    depth = max(k, DEPTH)
    scored = [text_ranking(query, depth)]
    if mode in ("hybrid", "hybrid-doc"):
        scored.append(vector_scores(conn, table, vector, depth, index, where))
    rankings = [[c for c, _ in ranked] for ranked in scored]
    if mode == "hybrid-doc":
        rankings.append(doc_vectors.doc_ranking(conn, docs, table, vector, depth))
    top = fuse(rankings, depth if mode == "hybrid-doc" else k, scored)
    if mode == "hybrid-doc" and where is not None:  # the document vectors' ranking knows no filter
        admitted = {r[0] for r in conn.execute(sql.SQL("SELECT chunk_id FROM {} WHERE chunk_id = ANY(%s) AND ({})").format(
            table, where), ([c for c, _ in top],))}
        top = [(c, s) for c, s in top if c in admitted]
    top = top[:k]
    lexical_scores = dict(scored[0])
    fields = hits.fetch(conn, table, [c for c, _ in top], vector)
    return [dict(fields[c], score=score, bm25=lexical_scores.get(c)) for c, score in top if c in fields]


def fused_ef_search(ef_search: int) -> int:
    """hnsw.ef_search for a fused mode: the config's, or FUSED_EF_SEARCH when that is deeper."""
    return max(ef_search, FUSED_EF_SEARCH)


def fused_search(conn, schema: str, name: str, mode: str, queries: list[str] | None, vectors, k: int, ef_search: int,
                 exact: bool, docs: sql.Composed | None = None, index: tuple[str, int] = ("vector", 0),
                 where: sql.Composable | None = None) -> list[list[dict]]:
    """Top-k chunks per query in a mode other than `vector`, in one transaction, from the chunk table
    `name` of `schema`. BM25 through the indexes (jobs/search/bm25.py); with `exact`, BM25 over every
    chunk that shares a word with the query and no index scans for the vector rankings, as
    search_many does. `where`: the filters' condition (jobs/search/filters.py), with the index scans
    iterative so that a selective one still fills the rankings."""
    table = sql.Identifier(schema, name)
    if mode not in MODES[1:] or queries is None:
        raise ValueError(f"search mode {mode!r} needs one of {MODES} and the query texts")
    with conn.transaction():
        conn.execute(sql.SQL("SET LOCAL hnsw.ef_search = {}").format(sql.Literal(fused_ef_search(ef_search))))
        if where is not None:
            vector_index.iterative_scans(conn)
        if exact:
            conn.execute("SET LOCAL enable_indexscan = off")
            stats = bm25.corpus_stats(conn, schema, name)

            def ranking(query: str, limit: int) -> list[tuple[str, float]]:
                return bm25.bm25_scores(conn, table, query, limit, stats, where)
        else:
            def ranking(query: str, limit: int) -> list[tuple[str, float]]:
                return bm25.scores(conn, schema, name, query, limit, where)
        return [ranked_search(conn, table, mode, q, v, k, ranking, docs, index, where) for q, v in zip(queries, vectors)]


def search(store: PgStore, coll: Collection, vector, k: int, ef_search: int = 40, exact: bool = False) -> list[dict]:
    """The top-k chunks of one vector, by cosine: search_many for one."""
    return search_many(store, coll, [vector], k, ef_search, exact)[0]


def search_many(store: PgStore, coll: Collection, vectors, k: int, ef_search: int = 40, exact: bool = False,
                queries: list[str] | None = None, mode: str = "vector",
                filters: list[filters_.Filter] | None = None) -> list[list[dict]]:
    """Top-k chunks per query of collection `coll` in `store`. `vector`: by cosine distance, through the
    HNSW index, or with `exact` a flat scan (index scans disabled) that measures what the index itself
    loses. `text` and `hybrid` rank by BM25 over the chunks' terms (hybrid: fused with the vector
    ranking; fused_search), `hybrid-doc` adds the document vectors' ranking (built first by the write
    side, PgStore.ensure_doc_vectors); all but `vector` need the query texts. `filters`
    (jobs/search/filters.py): only chunks they admit. Each hit has the fields of jobs/search/hits.py and
    its `score`: the cosine in `vector` mode, the fused score otherwise."""
    where = filters_.where(filters)
    # `exact` ranks by the float32 vectors themselves, whatever the index holds: what the index loses.
    kind = "vector" if exact else store.hnsw_kind(coll) or "vector"
    if mode != "vector":
        return fused_search(store.conn, store.schema, coll.chunk_table, mode, queries, vectors, k, ef_search, exact,
                            sql.Identifier(store.schema, doc_vectors.table_name(coll.chunk_table)),
                            (kind, coll.dimension), where)
    table = sql.Identifier(store.schema, coll.chunk_table)
    stmt = vector_index.nearest(kind, coll.dimension, table, sql.SQL("chunk_id"), where)
    depth = vector_index.depth(kind, k)
    out = []
    with store.conn.transaction():
        store.conn.execute(sql.SQL("SET LOCAL hnsw.ef_search = {}").format(sql.Literal(max(ef_search, depth))))
        if exact:
            store.conn.execute("SET LOCAL enable_indexscan = off")
        if where is not None:
            vector_index.iterative_scans(store.conn)
        for vector in vectors:
            v = np.asarray(vector, dtype=np.float32)
            rows = store.conn.execute(stmt, {"v": v, "lim": k, "depth": depth}).fetchall()
            fields = hits.fetch(store.conn, table, [r[0] for r in rows], v)
            out.append([dict(fields[c], score=float(s), bm25=None) for c, s in rows if c in fields])
    return out
