"""Measure the health of a loaded collection inside PostgreSQL: empty vectors, near-duplicate neighbours, token spread.

Everything is computed by the database in a few set-based queries after the load (no per-row round-trips). This
runs after every run that changed the collection, so its cost must not grow with the collection: a one-page edit
into a million chunks should cost about what it costs into an empty collection. So the number of vectors is
exact (the documents' checkpoint rows count it), and every other figure reads at most a bounded sample of the
chunk table: up to SAMPLE_ROWS chunks it reads them all (exact), above that a block sample of about SAMPLE_ROWS
rows (`TABLESAMPLE SYSTEM`, whose cost is the pages it reads, not the table's), and the duplicate rate probes
at most HNSW_SAMPLE chunks drawn from such a sample. `sampled` in the result says which figures were sampled
and from how many rows.

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

import math

from psycopg import sql

from jobs.store import index_kinds
from jobs.store.names import index_name

EMPTY_NORM = 1e-6
NEAR_ZERO_TOKENS = 8
AT_LIMIT_FRACTION = 0.97
NEAR_ZERO_WARN = 0.02
AT_LIMIT_WARN = 0.10
HNSW_EF_SEARCH = 40
HNSW_SAMPLE = 5000  # chunks probed for the duplicate rate when the index is used, at most
# The probes go in batches and stop once the duplicate rate's 95% interval is within ±PROBE_PRECISION: a
# probe is an index search (milliseconds on a busy machine), and a collection with few duplicates, the
# usual state, is known after 1,000 of them (none found: a rate below 0.4%), one near the 1% gate
# takes all 5,000 (±0.28%).
PROBE_BATCH = 1000
PROBE_PRECISION = 0.0025
SAMPLE_ROWS = 20_000  # rows the sampled figures read at most (about: a block sample's size varies a little)


def _nonempty(alias: str) -> sql.Composed:
    # PostgreSQL sorts NaN above every number, so `norm >= eps` alone would call a NaN-norm vector healthy.
    # pgvector refuses NaN on input today; the explicit test keeps the count honest if that ever changes.
    col = sql.SQL("{}.embedding").format(sql.Identifier(alias))
    return sql.SQL("({col} IS NOT NULL AND vector_norm({col}) >= {eps} AND vector_norm({col}) <> 'NaN'::float8)").format(
        col=col, eps=sql.Literal(EMPTY_NORM))


def _share(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


def _rows_of(table: sql.Composed, alias: str, vectors: int, rows: int) -> sql.Composed:
    """The chunk table, or a block sample of about `rows` of its `vectors` rows when it holds more. A
    block sample reads only the pages it picks; REPEATABLE makes one collection's figures stable from
    run to run (the same pages, as long as they hold the same rows)."""
    named = sql.SQL("{} AS {}").format(table, sql.Identifier(alias))
    if vectors <= rows:
        return named
    return sql.SQL("{} TABLESAMPLE SYSTEM ({}) REPEATABLE (0)").format(named, sql.Literal(100.0 * rows / vectors))


def _summary_stats(store, coll, table: sql.Composed, token_limit: int | None) -> dict:
    """The exact number of rows; empty-vector and token-count figures of at most about SAMPLE_ROWS of them."""
    # Exact from the checkpoint rows, which count each document's stored chunks in the transaction that
    # stores them (PgStore.commit_documents): a scan of the narrow documents table, not of the chunks.
    vectors = store.conn.execute(sql.SQL("SELECT coalesce(sum(chunk_count), 0) FROM {} WHERE collection = %s").format(
        sql.Identifier(store.schema, "documents")), (coll.name,)).fetchone()[0]
    threshold = AT_LIMIT_FRACTION * token_limit if token_limit is not None else None
    row = store.conn.execute(sql.SQL(
        "SELECT count(*), count(*) FILTER (WHERE NOT {nonempty}), count(t.token_count), "
        "percentile_cont(0.5) WITHIN GROUP (ORDER BY t.token_count), "
        "percentile_cont(0.95) WITHIN GROUP (ORDER BY t.token_count), max(t.token_count), "
        "count(*) FILTER (WHERE t.token_count < {near_zero}), "
        "count(*) FILTER (WHERE t.token_count >= %s::float8) "
        "FROM {rows}").format(
        nonempty=_nonempty("t"), near_zero=sql.Literal(NEAR_ZERO_TOKENS),
        rows=_rows_of(table, "t", vectors, SAMPLE_ROWS)), (threshold,)).fetchone()
    read, empty, n_tokens, median, p95, max_tokens, near_zero, at_limit = row
    return {
        "vectors": int(vectors),
        "read": int(read),  # the rows the other figures come from: all of them, or the sample
        "empty": int(empty),
        "tokens": {"n": int(n_tokens), "median": float(median) if median is not None else None,
                   "p95": float(p95) if p95 is not None else None,
                   "max": int(max_tokens) if max_tokens is not None else None},
        "near_zero": int(near_zero),
        "at_limit": int(at_limit),
    }


def _hnsw_index_exists(store, coll) -> bool:
    return store.hnsw_kind(coll) is not None or store.table_index(coll.chunk_table, "hnsw", "embedding") is not None


def _has_iterative_scan(store) -> bool:
    """pgvector 0.8 or later (older versions refuse the setting)."""
    row = store.conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
    return bool(row) and tuple(int(x) for x in row[0].split(".")[:2]) >= (0, 8)


def _duplicate_neighbours(store, table: sql.Composed, threshold: float, exact: bool,
                          index: tuple[str, int] = ("vector", 0), vectors: int = 0) -> tuple[int, int]:
    """(non-empty chunks checked, chunks whose nearest chunk of another document is above `threshold`
    cosine similarity). `index`: the kind of the table's vector index and the dimension, whose distance
    the probes order by so that they go through it (jobs/store/index_kinds.py); `vectors`: the table's
    rows, which the sample the probes come from is sized by."""
    # LEFT JOIN keeps a lone chunk (no other non-empty neighbour) in the denominator as "not a duplicate".
    # Through the index, a sample of at most HNSW_SAMPLE chunks is probed: enough for a rate, and the
    # cost stays flat as the collection grows (this runs after every run that changed it).
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
        # A block sample of about HNSW_SAMPLE rows, not `ORDER BY random()`, which reads and sorts the
        # whole table; probed PROBE_BATCH rows at a time (the sample scan is repeatable, so each batch's
        # OFFSET continues the same rows), until the rate is known to PROBE_PRECISION.
        probes = sql.SQL("(SELECT * FROM {} LIMIT %s OFFSET %s)").format(_rows_of(table, "s", vectors, HNSW_SAMPLE))
        stmt = sql.SQL(
            "SELECT count(*), count(*) FILTER (WHERE nn.similarity > %s) "
            "FROM {probes} AS a LEFT JOIN LATERAL ("
            "SELECT 1 - (b.embedding <=> a.embedding) AS similarity FROM {table} AS b "
            "WHERE b.doc_id <> a.doc_id AND {b_nonempty} "
            "ORDER BY {order} LIMIT 1"
            ") AS nn ON true WHERE {a_nonempty}").format(
            probes=probes, table=table, b_nonempty=_nonempty("b"), a_nonempty=_nonempty("a"),
            order=index_kinds.order_by(*index, "b.embedding", sql.SQL("a.embedding")))
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
        if exact:
            checked, duplicates = store.conn.execute(stmt, (threshold,)).fetchone()
            return int(checked), int(duplicates)
        checked = duplicates = 0
        for offset in range(0, HNSW_SAMPLE, PROBE_BATCH):
            c, d = store.conn.execute(stmt, (threshold, PROBE_BATCH, offset)).fetchone()
            checked, duplicates = checked + c, duplicates + d
            if not c or _half_width(duplicates, checked) <= PROBE_PRECISION:
                break  # the sample is used up, or the rate is known well enough
    return int(checked), int(duplicates)


def _half_width(k: int, n: int, z: float = 1.96) -> float:
    """Half the width of the 95% Wilson score interval of a rate of k in n."""
    if not n:
        return 1.0
    p = k / n
    return z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))


def index_metrics(store, coll, *, exact_below: int = 5000, near_duplicate_cosine: float = 0.995,
                  token_limit: int | None = None) -> dict:
    """Index-health metrics for collection `coll` (a `jobs.store.pgvector.Collection`) in `store` (a `PgStore`).

    Returns a flat dict: vectors, empty_vectors, empty_vector_rate, duplicate_checked, duplicate_neighbours,
    duplicate_neighbour_rate, near_duplicate_cosine, method ("exact" | "hnsw" | None), tokens {n, median, p95, max},
    near_zero_share, token_limit, at_limit_share (None without token_limit), warnings, sampled {rows, figures,
    duplicate_probes}: `vectors` is exact; the others are of every row up to SAMPLE_ROWS, of a sample above.
    """
    table = sql.Identifier(store.schema, coll.chunk_table)
    stats = _summary_stats(store, coll, table, token_limit)
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
                                                    index=(store.hnsw_kind(coll) or "vector", coll.dimension),
                                                    vectors=vectors)
        duplicate_rate = _share(duplicates, checked)

    n_tokens = stats["tokens"]["n"]
    # Shares of the rows read (all of them, or the sample): the empty-vector rate's denominator is those rows.
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
        "empty_vector_rate": _share(stats["empty"], stats["read"]),
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
        # Which figures come from a sample, and of how many rows (None: exact, every row read).
        "sampled": {"rows": stats["read"] if stats["read"] < vectors else None,
                    "figures": ["empty_vectors", "tokens", "near_zero_share", "at_limit_share"]
                    if stats["read"] < vectors else [],
                    "duplicate_probes": checked if method == "hnsw" else None},
    }
