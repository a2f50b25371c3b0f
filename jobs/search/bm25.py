"""A query's BM25 ranking (Robertson's weighting, k1 = 1.2, b = 0.75): through the indexes the write side
keeps (jobs/store/lexical.py), so its cost depends on the query and k, not on the collection's size; or,
for evaluation (`--exact`), computed in SQL over every chunk that shares a term with the query.

Through the indexes: the query's terms (jobs/terms.py, the analysis chunks were stored with) become the
sparse vector of their idf, and the inner product with a chunk's stored weights `lex` is its BM25 score.
Candidates come from the sparse HNSW index for the query's common words, and from the GIN index over
`lex_terms` for a word at most RARE_DF chunks hold (a graph walk can start on chunks that share nothing
with the query and never reach those few). N is the current one, from `lexical_totals`, which the store's
statement triggers keep as commits write; a term's document frequency is counted through the GIN index
when it is rare, else estimated from PostgreSQL's own statistics of `lex_terms` (`pg_stats`' most common
elements, which ANALYZE keeps for arrays).

Exact: from the stored terms, their frequencies and the chunk's length, with the table's pivot, so both
agree up to float32 rounding.
"""

from __future__ import annotations

import math

from psycopg import sql

from jobs.store import lexical
from jobs.terms import DIMENSION, K1, B, query_terms

RARE_DF = 1000  # a term in at most this many chunks: its chunks are candidates through GIN
# HNSW candidates for the sparse ranking (at least its depth), as many as pgvector allows: a graph over
# sparse vectors walks plateaus of equal (zero) scores, and at a million chunks a shorter list missed
# exact BM25's first hits for whole questions, where this one finds them at about the same cost
# (docs/benchmarks.md, Scale).
SPARSE_EF_SEARCH = 1000
TRUE = sql.SQL("TRUE")  # the condition of no filter


# ---- through the indexes ---------------------------------------------------------------------------
def _common(conn, schema: str, table: str) -> dict[int, float]:
    """PostgreSQL's most common term ids of `lex_terms` with the share of rows holding each (ANALYZE's)."""
    row = conn.execute("SELECT most_common_elems::text::int4[], most_common_elem_freqs FROM pg_stats "
                       "WHERE schemaname = %s AND tablename = %s AND attname = 'lex_terms'", (schema, table)).fetchone()
    if not row or not row[0]:
        return {}
    return dict(zip(row[0], row[1]))


def document_frequencies(conn, schema: str, table: str, terms: list[int], n: int) -> dict[int, int]:
    """How many chunks hold each term: ANALYZE's estimate for the common ones (a count would read a large
    part of the table), a count through the GIN index for the rest (one statement for all of them)."""
    common = _common(conn, schema, table)
    out: dict[int, int] = {}
    rare = []
    for term in terms:
        estimate = common.get(term, 0.0) * n
        if estimate > RARE_DF:
            out[term] = round(estimate)
        else:
            rare.append(term)
    if rare:
        out.update(conn.execute(sql.SQL(
            "SELECT u.term, (SELECT count(*) FROM {} WHERE lex_terms @> ARRAY[u.term]) "
            "FROM unnest(%s::int4[]) AS u(term)").format(sql.Identifier(schema, table)), (rare,)).fetchall())
    return out


def idf(df: int, n: int) -> float:
    return math.log(1 + (n - df + 0.5) / (df + 0.5))


def query_vector(weights: dict[int, float]) -> str:
    """A query's term weights as sparsevec text (1-based indices: a term id is its own index)."""
    return "{" + ",".join(f"{t}:{w!r}" for t, w in sorted(weights.items())) + f"}}/{DIMENSION}"


def scores(conn, schema: str, table: str, query: str, limit: int,
           where: sql.Composable | None = None) -> list[tuple[str, float]]:
    """(chunk id, BM25 score), best first, at most `limit`: candidates through the two indexes, scored by
    the sparse inner product, among the chunks `where` admits (a filter's condition; N and df stay the
    collection's). The caller's transaction may set hnsw.ef_search; it is raised to `limit`."""
    cond = sql.SQL("TRUE") if where is None else where
    terms = query_terms(query)
    if not terms:
        return []
    n, _ = lexical.totals(conn, schema, table)
    if n == 0:
        return []
    df = document_frequencies(conn, schema, table, terms, n)
    weights = {t: idf(f, n) for t, f in df.items() if f > 0}
    if not weights:
        return []
    t = sql.Identifier(schema, table)
    q = query_vector(weights)
    found: dict[str, float] = {}
    # This query's own candidate depth; the caller's setting (a vector ranking's) is put back after it.
    ef = conn.execute("SELECT current_setting('hnsw.ef_search', true)").fetchone()[0]
    wanted = max(limit, SPARSE_EF_SEARCH)
    if not ef or int(ef) < wanted:
        conn.execute(sql.SQL("SET LOCAL hnsw.ef_search = {}").format(sql.Literal(wanted)))
    rows = conn.execute(sql.SQL("SELECT chunk_id, -(lex <#> %(q)s::sparsevec) FROM {} WHERE {} "
                                "ORDER BY lex <#> %(q)s::sparsevec LIMIT %(lim)s").format(t, cond),
                        {"q": q, "lim": limit}).fetchall()
    if ef and int(ef) < wanted:
        conn.execute(sql.SQL("SET LOCAL hnsw.ef_search = {}").format(sql.Literal(int(ef))))
    for chunk, score in rows:
        if score > 0:
            found[chunk] = float(score)
    rare = [term for term, f in df.items() if 0 < f <= RARE_DF]
    if rare:
        # Only the best `limit` of them can be among the best `limit` in all: the server sorts, so a query of
        # many rare terms (up to RARE_DF chunks each) sends `limit` rows, not every chunk that holds one. The
        # candidates come from GIN whole (a materialized CTE): an ORDER BY on the table itself could be
        # served by the weights' HNSW index, which would filter after its walk and lose the rare hits.
        for chunk, score in conn.execute(sql.SQL(
                "WITH c AS MATERIALIZED (SELECT chunk_id, lex FROM {} WHERE lex_terms && %s::int4[] AND ({})) "
                "SELECT chunk_id, -(lex <#> %s::sparsevec) FROM c ORDER BY lex <#> %s::sparsevec, chunk_id "
                "LIMIT %s").format(t, cond), (rare, q, q, limit)):
            found[chunk] = float(score)
    return sorted(found.items(), key=lambda item: (-item[1], item[0]))[:limit]


# ---- exact, in SQL (`--exact`) -----------------------------------------------------------------------
def corpus_stats(conn, schema: str, name: str) -> tuple[int, float]:
    """How many embedded chunks there are (counted) and the table's pivot: exact BM25's N and avgdl."""
    n = conn.execute(sql.SQL("SELECT count(*) FROM {} WHERE NOT omitted").format(
        sql.Identifier(schema, name))).fetchone()[0]
    return int(n), lexical.pivot(conn, schema, name) or lexical.DEFAULT_PIVOT


# Each CTE is materialized: inlined, the planner re-runs the tsvector unnest once per query lexeme.
_BM25 = """
WITH qd AS MATERIALIZED (
    SELECT u.term, (SELECT count(*) FROM {t} WHERE lex_terms @> ARRAY[u.term] AND NOT omitted) AS df
    FROM unnest(%(terms)s::int4[]) AS u(term)),
qt AS MATERIALIZED (SELECT array_agg(term) AS terms FROM qd WHERE df > 0),
cand AS MATERIALIZED (SELECT c.chunk_id, c.lex_terms, c.lex_tfs, c.lex_length AS dl FROM {t} c, qt
                      WHERE c.lex_terms && qt.terms AND NOT c.omitted AND ({where})),
terms AS MATERIALIZED (SELECT c.chunk_id, c.dl, u.term, u.tf
                       FROM cand c CROSS JOIN LATERAL unnest(c.lex_terms, c.lex_tfs) AS u(term, tf))
SELECT t.chunk_id, sum(ln(1 + (%(n)s - qd.df + 0.5) / (qd.df + 0.5))
                       * t.tf * ({k1} + 1) / (t.tf + {k1} * (1 - {b} + {b} * t.dl / %(avgdl)s))) AS score
FROM terms t JOIN qd ON qd.term = t.term
GROUP BY t.chunk_id
ORDER BY score DESC, t.chunk_id
LIMIT %(lim)s"""


def bm25_scores(conn, table: sql.Composed, query: str, limit: int, stats: tuple[int, float],
                where: sql.Composable | None = None) -> list[tuple[str, float]]:
    """(chunk id, BM25 score), best first, of the chunks `where` admits (jobs/search/filters.py; N and
    the pivot, `stats` from corpus_stats, stay the collection's)."""
    terms = query_terms(query)
    if not terms:
        return []
    stmt = sql.SQL(_BM25).format(t=table, k1=sql.Literal(K1), b=sql.Literal(B), where=TRUE if where is None else where)
    return [(r[0], float(r[1])) for r in conn.execute(stmt, {"terms": terms, "n": stats[0], "avgdl": max(stats[1], 1.0),
                                                             "lim": limit})]
