"""The vectors' HNSW index: over the float32 vectors as stored, over their half-precision copy, or over
their binary quantization, and the ORDER BY expression that goes with each (`database.vector_index`).

The chunk table keeps its float32 `embedding` column whatever the index (Parquet, reloads, re-embeds and
vector reuse read it as it is); only the index changes, as a pgvector expression index:

- `vector`: `embedding vector_cosine_ops`, 4 bytes a dimension in the graph;
- `halfvec`: `(embedding::halfvec(d)) halfvec_cosine_ops`, 2 bytes a dimension;
- `binary`: `(binary_quantize(embedding)::bit(d)) bit_hamming_ops`, 1 bit a dimension, the candidates
  re-ranked by their float32 cosine (jobs/search/vector_index.py, the search's query).

The halfvec and binary candidates are re-ranked by the float32 vectors too, so a hit's score is always
its true cosine. Which kind a table has is read from its index's definition, so a table built under one
setting is searched correctly under another until its index is rebuilt.

The write side builds the index from `key` (jobs/store/index_build.py sizes its memory by `value_bytes`).
A query goes through the index only when it orders by the index's own expression, `order_by`: the two
stay side by side here, where the index is defined, and the search (and the index metrics) import them.
"""

from __future__ import annotations

from psycopg import sql

KINDS = ("vector", "halfvec", "binary")


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
