"""Document vectors: one vector per document (its title and heading outline) beside a chunk table,
for the `hybrid-doc` search mode.

A question that describes a page ("Returns the first N elements of a collection") matches the page's
gist better than any one of its chunks; a question about a detail matches a chunk. `hybrid-doc` adds
a third ranking to hybrid's two: documents by the cosine of their outline vector, each standing in
for its best chunk (by the chunk vectors), fused by the same reciprocal rank fusion. Measured on the
dev sets it lifts description-like questions a lot and costs detail questions some
(openshift-docs page hit@1: 0.830 by hybrid, 0.736 with it), so it is a mode to choose, not the default.

The vectors are derived data, built by the write side only: `corpusmill upgrade --doc-vectors` builds
them for a collection with its embedding space's model and brings them up to date (an outline whose text
changed is embedded again, a document gone is dropped); later upgrades of a collection that has them
keep them current. A search only reads them (a read-only role can search in `hybrid-doc`) and, where they
are missing, says how to build them; a document added since the last upgrade is still found by the
other two rankings.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable

import numpy as np
from psycopg import sql

from jobs.store.names import bounded_name

log = logging.getLogger(__name__)
ENCODE_BATCH = 1024  # outlines a call to `encode`, so that a long build can say how far it is
PROGRESS_SECONDS = 10.0  # a progress line at most this often
OUTLINE_HEADINGS = 40  # headings an outline keeps: a long reference page's tail adds nothing to its gist


def table_name(chunk_table: str) -> str:
    return bounded_name(chunk_table, "_docs")


def outline(heading_paths: list[list[str]]) -> str:
    """A document's title, then its headings in order, each once: `Title\\nA; B; C`."""
    title = next((p[0] for p in heading_paths if p), "")
    seen, heads = {title}, []
    for path in heading_paths:
        for h in path[1:]:
            if h not in seen:
                seen.add(h)
                heads.append(h)
    return title + ("\n" + "; ".join(heads[:OUTLINE_HEADINGS]) if heads else "")


def exists(conn, schema: str, chunk_table: str) -> bool:
    """Whether `chunk_table` has its document vectors (a catalog lookup; writes nothing)."""
    return conn.execute("SELECT to_regclass(format('%%I.%%I', %s::text, %s::text)) IS NOT NULL",
                        (schema, table_name(chunk_table))).fetchone()[0]


def ensure(conn, schema: str, chunk_table: str, dimension: int, encode: Callable[[list[str]], np.ndarray]) -> int:
    """Create or bring up to date the document vectors of `chunk_table`; returns how many were embedded now."""
    docs, chunks = sql.Identifier(schema, table_name(chunk_table)), sql.Identifier(schema, chunk_table)
    conn.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} (doc_id text PRIMARY KEY, source_path text NOT NULL, "
                         "outline_sha256 text NOT NULL, embedding vector({}) NOT NULL)").format(
        docs, sql.Literal(dimension)))
    paths: dict[str, tuple[str, list[list[str]]]] = {}
    for doc_id, source_path, heading_path in conn.execute(sql.SQL(
            "SELECT doc_id, source_path, heading_path FROM {} ORDER BY doc_id, seq").format(chunks)):
        paths.setdefault(doc_id, (source_path, []))[1].append(list(heading_path or []))
    wanted = {d: (p, text, hashlib.sha256(text.encode()).hexdigest())
              for d, (p, hp) in paths.items() for text in [outline(hp)]}
    have = dict(conn.execute(sql.SQL("SELECT doc_id, outline_sha256 FROM {}").format(docs)).fetchall())
    todo = [d for d, (_, _, sha) in wanted.items() if have.get(d) != sha]
    gone = [d for d in have if d not in wanted]
    with conn.transaction():
        if gone:
            conn.execute(sql.SQL("DELETE FROM {} WHERE doc_id = ANY(%s)").format(docs), (gone,))
        if todo:
            log.info("document vectors of %s: embedding %d outlines", chunk_table, len(todo))
            vectors = _encoded([wanted[d][1] for d in todo], encode, chunk_table)
            with conn.cursor() as cur:
                cur.executemany(sql.SQL(
                    "INSERT INTO {} (doc_id, source_path, outline_sha256, embedding) VALUES (%s, %s, %s, %s) "
                    "ON CONFLICT (doc_id) DO UPDATE SET source_path = EXCLUDED.source_path, "
                    "outline_sha256 = EXCLUDED.outline_sha256, embedding = EXCLUDED.embedding").format(docs),
                    [(d, wanted[d][0], wanted[d][2], np.asarray(v, dtype=np.float32)) for d, v in zip(todo, vectors)])
        conn.execute(sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} USING hnsw (embedding vector_cosine_ops)").format(
            sql.Identifier(bounded_name(table_name(chunk_table), "_hnsw")), docs))
    return len(todo)


def _encoded(texts: list[str], encode: Callable[[list[str]], np.ndarray], chunk_table: str) -> list:
    """`encode` over `texts` a batch at a time, with a progress line every PROGRESS_SECONDS (a collection of
    a hundred thousand documents takes minutes on CPU). The rows are written in one transaction after."""
    vectors: list = []
    told = time.monotonic()
    for i in range(0, len(texts), ENCODE_BATCH):
        vectors.extend(encode(texts[i:i + ENCODE_BATCH]))
        if time.monotonic() - told >= PROGRESS_SECONDS:
            told = time.monotonic()
            log.info("document vectors of %s: %d of %d outlines embedded", chunk_table, len(vectors), len(texts))
    return vectors


def doc_ranking(conn, docs: sql.Composed, chunks: sql.Composed, vector, limit: int) -> list[str]:
    """Chunk ids: the documents nearest `vector` by outline, each as its chunk nearest `vector`."""
    v = np.asarray(vector, dtype=np.float32)
    return [r[0] for r in conn.execute(sql.SQL(
        "SELECT best.chunk_id FROM (SELECT doc_id, embedding <=> %(v)s AS dist FROM {docs} "
        "ORDER BY embedding <=> %(v)s LIMIT %(lim)s) AS d CROSS JOIN LATERAL ("
        # `+ 0`: not the HNSW index's ordering, so the planner takes the document's rows by doc_id; an HNSW
        # scan filtered to one document would return nothing once its ef_search candidates miss it.
        "SELECT c.chunk_id FROM {chunks} c WHERE c.doc_id = d.doc_id ORDER BY (c.embedding <=> %(v)s) + 0 LIMIT 1"
        ") AS best "
        "ORDER BY d.dist").format(docs=docs, chunks=chunks), {"v": v, "lim": limit})]


def drop(conn, schema: str, chunk_table: str) -> None:
    conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(schema, table_name(chunk_table))))
