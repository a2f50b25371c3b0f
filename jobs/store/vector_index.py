"""The vectors' HNSW index: over the float32 vectors as stored, over their half-precision copy, or over
their binary quantization, and the nearest-neighbour query that goes with each.

The chunk table keeps its float32 `embedding` column whatever the index (Parquet, reloads, re-embeds and
vector reuse read it as it is); only the index changes, as a pgvector expression index:

- `vector`: `embedding vector_cosine_ops`, 4 bytes a dimension in the graph;
- `halfvec`: `(embedding::halfvec(d)) halfvec_cosine_ops`, 2 bytes a dimension;
- `binary`: `(binary_quantize(embedding)::bit(d)) bit_hamming_ops`, 1 bit a dimension, the candidates
  re-ranked by their float32 cosine (RERANK times as many as asked for).

The halfvec and binary candidates are re-ranked by the float32 vectors too, so a hit's score is always
its true cosine. Which kind a table has is read from its index's definition, so a table built under one
setting is searched correctly under another until its index is rebuilt.
"""

from __future__ import annotations

from psycopg import sql

KINDS = ("vector", "halfvec", "binary")
RERANK = 4  # binary: candidates per hit re-ranked by float32 cosine


def key(kind: str, dimension: int) -> sql.Composable:
    """The index key (expression and operator class) of an index of `kind`."""
    d = sql.Literal(dimension)
    if kind == "vector":
        return sql.SQL("embedding vector_cosine_ops")
    if kind == "halfvec":
        return sql.SQL("(embedding::halfvec({})) halfvec_cosine_ops").format(d)
    if kind == "binary":
        return sql.SQL("(binary_quantize(embedding)::bit({})) bit_hamming_ops").format(d)
    raise ValueError(f"vector index {kind!r}: one of {', '.join(KINDS)}")


def value_bytes(kind: str, dimension: int) -> float:
    """One element's value in the graph (for the build's memory estimate)."""
    return {"vector": 4 * dimension + 8, "halfvec": 2 * dimension + 8, "binary": dimension / 8 + 8}[kind]


def kind_of(conn, schema: str, index: str) -> str | None:
    """The kind of the index named `index`, from its definition; None when there is no such index."""
    row = conn.execute("SELECT indexdef FROM pg_indexes WHERE schemaname = %s AND indexname = %s",
                       (schema, index)).fetchone()
    if not row:
        return None
    return "binary" if "bit_hamming_ops" in row[0] else "halfvec" if "halfvec_cosine_ops" in row[0] else "vector"


def order_by(kind: str, dimension: int, left: str, right: sql.Composable) -> sql.Composable:
    """The ORDER BY expression the index of `kind` serves: the distance from column reference `left`
    (e.g. `b.embedding`) to the vector `right` (a parameter or another column)."""
    col = sql.SQL(left)
    d = sql.Literal(dimension)
    if kind == "halfvec":
        return sql.SQL("{}::halfvec({}) <=> ({})::halfvec({})").format(col, d, right, d)
    if kind == "binary":
        return sql.SQL("binary_quantize({})::bit({}) <~> binary_quantize(({})::vector)::bit({})").format(col, d, right, d)
    return sql.SQL("{} <=> {}").format(col, right)


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
