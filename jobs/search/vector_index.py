"""The nearest-neighbour query through the vectors' HNSW index, whichever kind it is (float32, halfvec or
binary: jobs/store/index_kinds.py, where the write side builds it).

A `halfvec` or `binary` index finds candidates by its own, coarser distance; they are re-ranked by the
float32 vectors, so a hit's score is always its true cosine. A binary index gives RERANK times as many
candidates as asked for, since its Hamming distance orders them loosely.
"""

from __future__ import annotations

from psycopg import sql

from jobs.store.index_kinds import order_by

RERANK = 4  # binary: candidates per hit re-ranked by float32 cosine


def depth(kind: str, limit: int) -> int:
    """Candidates to take through the index for `limit` hits."""
    return limit * RERANK if kind == "binary" else limit


def iterative_scans(conn) -> bool:
    """Let this transaction's HNSW scans go on past ef_search until enough rows pass a filter (pgvector
    0.8's iterative index scans; `relaxed_order`: candidates may arrive slightly out of order, and every
    query here re-orders them by exact distance). False on an older pgvector, whose filtered scans may
    return fewer rows than asked."""
    row = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
    if not row or tuple(int(p) for p in row[0].split(".")[:2]) < (0, 8):
        return False
    conn.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
    return True


def nearest(kind: str, dimension: int, table: sql.Composable, fields: sql.Composable,
            where: sql.Composable | None = None) -> sql.Composable:
    """`fields` and the cosine `score` of the %(lim)s chunks nearest to %(v)s through the index of `kind`,
    nearest first (%(depth)s: depth(kind, lim) candidates, re-ranked by float32 cosine), among those
    `where` admits (a filter's condition: the transaction should allow iterative_scans)."""
    v = sql.Placeholder("v")
    if where is not None:
        return sql.SQL("SELECT {}, 1 - (embedding <=> %(v)s) AS score FROM (SELECT * FROM {} WHERE {} ORDER BY {} "
                       "LIMIT %(depth)s) AS c ORDER BY embedding <=> %(v)s LIMIT %(lim)s").format(
            fields, table, where, order_by(kind, dimension, "embedding", v))
    if kind == "vector":
        return sql.SQL("SELECT {}, 1 - (embedding <=> %(v)s) AS score FROM {} ORDER BY embedding <=> %(v)s "
                       "LIMIT %(lim)s").format(fields, table)
    return sql.SQL("SELECT {}, 1 - (embedding <=> %(v)s) AS score FROM (SELECT * FROM {} ORDER BY {} "
                   "LIMIT %(depth)s) AS c ORDER BY embedding <=> %(v)s LIMIT %(lim)s").format(
        fields, table, order_by(kind, dimension, "embedding", v))
