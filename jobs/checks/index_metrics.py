"""Measure the health of a loaded collection inside PostgreSQL: empty vectors, near-duplicate neighbours, token spread.

Everything is computed by the database in a few set-based queries after the load (no per-row round-trips), so the
same call works on a 50-chunk test collection and on a multi-million-row table.

Empty vectors (L2 norm below 1e-6, NULL, or a NaN norm) are counted, then left out of the duplicate computation on
both sides. pgvector's cosine distance to a zero vector is NaN (0/0), and PostgreSQL treats NaN as larger than every
number, so `similarity > threshold` would be true and a chunk whose only neighbour is a zero vector would count as a
duplicate; a tiny non-zero vector would be a cosine-1.0 "duplicate" of whatever it points along. The rate is therefore
duplicates among non-empty vectors (`duplicate_checked` is its denominator). The cosine HNSW index holds no zero
vectors either, so both methods agree.

A duplicate is a chunk whose nearest chunk *of another document* is above `near_duplicate_cosine`: the
same text indexed twice (a copied page, boilerplate repeated across pages). Chunks of one document
that a small embedder cannot tell apart are not duplication: the parts of one long code block cut to
fit the window (log lines, image digests), the rows of one table that differ only in their numbers,
release notes that differ in a version. Within a document the chunker drops repeated paragraphs
(jobs/markdown/windows.py); a code block or table repeated inside one page is not counted here.
"""

from __future__ import annotations

from psycopg import sql

from jobs.store import vector_index
from jobs.store.names import index_name

EMPTY_NORM = 1e-6
NEAR_ZERO_TOKENS = 8
AT_LIMIT_FRACTION = 0.97
NEAR_ZERO_WARN = 0.02
AT_LIMIT_WARN = 0.10
HNSW_EF_SEARCH = 40
HNSW_SAMPLE = 5000  # chunks probed for the duplicate rate when the index is used


def _nonempty(alias: str) -> sql.Composed:
    # PostgreSQL sorts NaN above every number, so `norm >= eps` alone would call a NaN-norm vector healthy.
    # pgvector refuses NaN on input today; the explicit test keeps the count honest if that ever changes.
    col = sql.SQL("{}.embedding").format(sql.Identifier(alias))
    return sql.SQL("({col} IS NOT NULL AND vector_norm({col}) >= {eps} AND vector_norm({col}) <> 'NaN'::float8)").format(
        col=col, eps=sql.Literal(EMPTY_NORM))


def _share(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


def _summary_stats(store, table: sql.Composed, token_limit: int | None) -> dict:
    """Row, empty-vector and token-count figures from one scan of the chunk table."""
    threshold = AT_LIMIT_FRACTION * token_limit if token_limit is not None else None
    row = store.conn.execute(sql.SQL(
        "SELECT count(*), count(*) FILTER (WHERE NOT {nonempty}), count(t.token_count), "
        "percentile_cont(0.5) WITHIN GROUP (ORDER BY t.token_count), "
        "percentile_cont(0.95) WITHIN GROUP (ORDER BY t.token_count), max(t.token_count), "
        "count(*) FILTER (WHERE t.token_count < {near_zero}), "
        "count(*) FILTER (WHERE t.token_count >= %s::float8) "
        "FROM {table} AS t").format(
        nonempty=_nonempty("t"), near_zero=sql.Literal(NEAR_ZERO_TOKENS), table=table), (threshold,)).fetchone()
    vectors, empty, n_tokens, median, p95, max_tokens, near_zero, at_limit = row
    return {
        "vectors": int(vectors),
        "empty": int(empty),
        "tokens": {"n": int(n_tokens), "median": float(median) if median is not None else None,
                   "p95": float(p95) if p95 is not None else None,
                   "max": int(max_tokens) if max_tokens is not None else None},
        "near_zero": int(near_zero),
        "at_limit": int(at_limit),
    }


def _hnsw_index_exists(store, coll) -> bool:
    return store.vector_index_kind(coll) is not None or store.table_index(coll.chunk_table, "hnsw", "embedding") is not None


def _has_iterative_scan(store) -> bool:
    """pgvector 0.8 or later (older versions refuse the setting)."""
    row = store.conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
    return bool(row) and tuple(int(x) for x in row[0].split(".")[:2]) >= (0, 8)


def _duplicate_neighbours(store, table: sql.Composed, threshold: float, exact: bool,
                          index: tuple[str, int] = ("vector", 0)) -> tuple[int, int]:
    """(non-empty chunks checked, chunks whose nearest chunk of another document is above `threshold`
    cosine similarity). `index`: the kind of the table's vector index and the dimension, whose distance
    the probes order by so that they go through it (jobs/store/vector_index.py)."""
    # LEFT JOIN keeps a lone chunk (no other non-empty neighbour) in the denominator as "not a duplicate".
    # Through the index, a random sample of HNSW_SAMPLE chunks is probed: enough for a rate, and the
    # cost stays flat as the collection grows (this runs after every load).
    if exact:
        # Norms once per row, not once per pair: the non-empty rows are materialized first, then every
        # pair's distance is computed once (n² distances, but no n² norms).
        stmt = sql.SQL(
            "WITH ok AS MATERIALIZED (SELECT chunk_id, doc_id, embedding FROM {table} AS a WHERE {a_nonempty}) "
            "SELECT count(*), count(*) FILTER (WHERE nn.similarity > %s) FROM ok AS a LEFT JOIN LATERAL ("
            "SELECT 1 - (b.embedding <=> a.embedding) AS similarity FROM ok AS b WHERE b.doc_id <> a.doc_id "
            "ORDER BY b.embedding <=> a.embedding LIMIT 1) AS nn ON true").format(
            table=table, a_nonempty=_nonempty("a"))
    else:
        probes = sql.SQL("(SELECT * FROM {} ORDER BY random() LIMIT {})").format(table, sql.Literal(HNSW_SAMPLE))
        stmt = sql.SQL(
            "SELECT count(*), count(*) FILTER (WHERE nn.similarity > %s) "
            "FROM {probes} AS a LEFT JOIN LATERAL ("
            "SELECT 1 - (b.embedding <=> a.embedding) AS similarity FROM {table} AS b "
            "WHERE b.doc_id <> a.doc_id AND {b_nonempty} "
            "ORDER BY {order} LIMIT 1"
            ") AS nn ON true WHERE {a_nonempty}").format(
            probes=probes, table=table, b_nonempty=_nonempty("b"), a_nonempty=_nonempty("a"),
            order=vector_index.order_by(*index, "b.embedding", sql.SQL("a.embedding")))
    with store.conn.transaction():
        if exact:
            # A true flat scan: the number is ground truth, not whatever the approximate index happens to return.
            store.conn.execute("SET LOCAL enable_indexscan = off")
        else:
            # Only the single nearest chunk of another document is needed. The index returns ef_search
            # candidates before the filter, and a document cut into many similar parts can fill them all:
            # pgvector's iterative scan (0.8+) goes on until one passes.
            store.conn.execute(sql.SQL("SET LOCAL hnsw.ef_search = {}").format(sql.Literal(HNSW_EF_SEARCH)))
            if _has_iterative_scan(store):
                store.conn.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
            # On a small table the planner prefers a sequential scan per probe, which computes every row's
            # norm for the non-empty filter each time: 5 s for 727 chunks against 0.5 s for 3,255 through
            # the index. The probes go through the index.
            store.conn.execute("SET LOCAL enable_seqscan = off")
        checked, duplicates = store.conn.execute(stmt, (threshold,)).fetchone()
    return int(checked), int(duplicates)


def index_metrics(store, coll, *, exact_below: int = 5000, near_duplicate_cosine: float = 0.995,
                  token_limit: int | None = None) -> dict:
    """Index-health metrics for collection `coll` (a `jobs.store.pgvector.Collection`) in `store` (a `PgStore`).

    Returns a flat dict: vectors, empty_vectors, empty_vector_rate, duplicate_checked, duplicate_neighbours,
    duplicate_neighbour_rate, near_duplicate_cosine, method ("exact" | "hnsw" | None), tokens {n, median, p95, max},
    near_zero_share, token_limit, at_limit_share (None without token_limit), warnings.
    """
    table = sql.Identifier(store.schema, coll.chunk_table)
    stats = _summary_stats(store, table, token_limit)
    vectors = stats["vectors"]
    warnings: list[str] = []

    # Through the index whenever it exists (a sample of HNSW_SAMPLE probes, under a second on thousands
    # of vectors); the exact flat scan is n² distances, minutes on a few thousand, so only without one.
    has_index = bool(vectors) and _hnsw_index_exists(store, coll)
    method: str | None = "hnsw" if has_index or vectors >= exact_below else "exact"
    checked = duplicates = 0
    duplicate_rate: float | None = 0.0
    if not vectors:
        pass  # nothing loaded: no neighbours to compare, and no index is expected yet
    elif method == "hnsw" and not has_index:
        # Without the index the "hnsw" query degrades to an n² scan that can run for hours on a large table;
        # leave the figure unmeasured (a gate on it then fails loudly) rather than stall the run.
        method, duplicate_rate = None, None
        warnings.append(f"duplicate_neighbour_rate not measured: {vectors} vectors is at or above exact_below="
                        f"{exact_below} and the HNSW index {index_name(coll.chunk_table, 'hnsw')} does not exist yet")
    else:
        checked, duplicates = _duplicate_neighbours(store, table, near_duplicate_cosine, exact=method == "exact",
                                                    index=(store.vector_index_kind(coll) or "vector", coll.dimension))
        duplicate_rate = _share(duplicates, checked)

    n_tokens = stats["tokens"]["n"]
    near_zero_share = _share(stats["near_zero"], n_tokens)
    at_limit_share = _share(stats["at_limit"], n_tokens) if token_limit is not None else None
    if near_zero_share > NEAR_ZERO_WARN:
        warnings.append(f"{near_zero_share:.1%} of chunks ({stats['near_zero']} of {n_tokens}) have fewer than "
                        f"{NEAR_ZERO_TOKENS} tokens: junk is being kept (more than {NEAR_ZERO_WARN:.0%}); "
                        "review the minimum chunk size and the omit rules")
    if at_limit_share is not None and at_limit_share > AT_LIMIT_WARN:
        warnings.append(f"{at_limit_share:.1%} of chunks ({stats['at_limit']} of {n_tokens}) are at "
                        f"{AT_LIMIT_FRACTION:.0%} or more of the {token_limit}-token limit: ideas are being chopped "
                        f"(more than {AT_LIMIT_WARN:.0%}); lower the chunk size or raise the limit")

    return {
        "vectors": vectors,
        "empty_vectors": stats["empty"],
        "empty_vector_rate": _share(stats["empty"], vectors),
        "duplicate_checked": checked,
        "duplicate_neighbours": duplicates,
        "duplicate_neighbour_rate": duplicate_rate,
        "near_duplicate_cosine": near_duplicate_cosine,
        "method": method,
        "tokens": stats["tokens"],
        "near_zero_share": near_zero_share,
        "token_limit": token_limit,
        "at_limit_share": at_limit_share,
        "warnings": warnings,
    }
