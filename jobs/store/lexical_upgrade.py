"""A chunk table whose terms this release's analyser did not make, brought to today's shape on its next
ingest, load or reembed (PgStore.ensure_collection; never on a read). Two kinds:

- a table made before text analysis left the database: the generated columns `tsv` (to_tsvector, under a
  GIN index) and `lex` (bm25_document, migration 007, under an HNSW index);
- a table whose terms an earlier analyser made (`lexical_pivots.terms` is not jobs/terms.py
  TERMS_VERSION): a query analysed by this release finds its terms only in chunks analysed alike.

The upgrade, resumable at every step:

1. one transaction: `tsv` and its GIN index are dropped, `lex` stops being generated (DROP EXPRESSION
   keeps its values, no rewrite), the columns lex_terms, lex_tfs and lex_length are added where missing;
   the indexes over `lex` and `lex_terms` are dropped (the weights and terms change), and the pivot is
   set anew from the first batch analysed (chunk ids are hashes, so the first by id are a sample of the
   table; that batch, analysed once, is the first written in step 2), with this release's version and
   `analysed_to` '' (the batches start at the first chunk id);
   `backfilled` is false where the rows have no terms at all yet (the old shape: searches wait for it);
2. batches of BATCH_ROWS rows in chunk id order after `analysed_to`: chunk id, breadcrumb and text read,
   analysed here (jobs/terms.py), their weights computed at the pivot, COPYed into a temporary table and
   written by one UPDATE … FROM, each batch its own transaction with `analysed_to` set to its last chunk
   id (a crash resumes after it; a table of the earlier version answers searches with its old terms
   meanwhile);
3. `backfilled` true and `analysed_to` NULL, the totals re-seeded from lex_length (lexical.install_triggers).

The indexes (GIN over lex_terms, HNSW over lex) are built by `ensure_indexes` (here too: the lexical
columns' DDL lives in this module) after the run, as for a new table.
"""

from __future__ import annotations

import logging
import time

import pyarrow as pa
from psycopg import sql

from jobs.store import index_build, lexical
from jobs.store.names import index_name
from jobs.terms import MAX_DIMS, TERMS_VERSION

log = logging.getLogger(__name__)

BATCH_ROWS = 5000
PROGRESS_SECONDS = 10.0  # a progress line at most this often: a large table's analysis takes minutes


def _columns(conn, schema: str, table: str) -> dict[str, str]:
    """column name -> attgenerated ('' or 's') of `table`."""
    return dict(conn.execute(
        "SELECT a.attname, a.attgenerated FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
        "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = %s "
        "AND a.attnum > 0 AND NOT a.attisdropped", (schema, table)).fetchall())


def _state(conn, schema: str, table: str) -> tuple[bool, int, str | None] | None:
    """(backfilled, terms version, analysed_to) of `table`'s pivot row (None: no commit has set one)."""
    return conn.execute(sql.SQL("SELECT backfilled, terms, analysed_to FROM {} WHERE chunk_table = %s").format(
        sql.Identifier(schema, "lexical_pivots")), (table,)).fetchone()


def _old_shape(cols: dict[str, str]) -> bool:
    return "lex_terms" not in cols or "tsv" in cols or cols.get("lex") == "s" or "lex" not in cols


def needed(conn, schema: str, table: str) -> bool:
    """Whether `table` still has the old shape or terms of another analyser, or an upgrade of it stopped
    before its last batch."""
    cols = _columns(conn, schema, table)
    if not cols:
        return False
    if _old_shape(cols):
        return True
    state = _state(conn, schema, table)
    return state is not None and (not state[0] or state[1] != TERMS_VERSION or state[2] is not None)


def searchable(conn, schema: str, table: str) -> bool:
    """Whether every row of `table` has terms (of this analyser or an earlier one): what BM25 needs."""
    cols = _columns(conn, schema, table)
    if not cols:
        return True
    if _old_shape(cols):
        return False
    state = _state(conn, schema, table)
    return state is None or state[0]


def _batch(conn, t: sql.Composed, after: str, limit: int) -> pa.Table:
    rows = conn.execute(sql.SQL("SELECT chunk_id, breadcrumb, text FROM {} WHERE chunk_id > %s "
                                "ORDER BY chunk_id LIMIT %s").format(t), (after, limit)).fetchall()
    return pa.table({"chunk_id": pa.array([r[0] for r in rows], pa.string()),
                     "breadcrumb": pa.array([r[1] for r in rows], pa.string()),
                     "text": pa.array([r[2] for r in rows], pa.large_string())})


def _reshape(conn, schema: str, table: str, batch_rows: int) -> tuple[str, pa.Table | None]:
    """Step 1, in the caller's transaction; returns the chunk id the batches start after and, when they
    start at the first, the first batch already analysed (the pivot's sample)."""
    t = sql.Identifier(schema, table)
    cols = _columns(conn, schema, table)
    conn.execute(sql.SQL("LOCK TABLE {} IN SHARE ROW EXCLUSIVE MODE").format(t))
    old_shape = _old_shape(cols)
    if "tsv" in cols:
        conn.execute(sql.SQL("ALTER TABLE {} DROP COLUMN tsv").format(t))  # its GIN index goes with it
    if cols.get("lex") == "s":
        conn.execute(sql.SQL("ALTER TABLE {} ALTER COLUMN lex DROP EXPRESSION").format(t))
    conn.execute(sql.SQL("ALTER TABLE {} ADD COLUMN IF NOT EXISTS lex sparsevec(1000000000), "
                         "ADD COLUMN IF NOT EXISTS lex_terms int4[], ADD COLUMN IF NOT EXISTS lex_tfs int4[], "
                         "ADD COLUMN IF NOT EXISTS lex_length int4").format(t))
    state = _state(conn, schema, table)
    if state is not None and state[1] == TERMS_VERSION and state[2] is not None:
        return state[2], None  # resumed: this analyser's batches stopped after that chunk id
    for (index,) in conn.execute(
            "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_class r "
            "ON r.oid = i.indrelid JOIN pg_namespace n ON n.oid = r.relnamespace JOIN pg_attribute a "
            "ON a.attrelid = r.oid AND a.attnum = i.indkey[0] WHERE n.nspname = %s AND r.relname = %s "
            "AND a.attname IN ('lex', 'lex_terms')", (schema, table)).fetchall():
        conn.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(schema, index)))
    lexical.forget_pivot(conn, schema, table)
    sample = lexical.fill(_batch(conn, t, "", batch_rows))
    if sample.num_rows:
        lexical.settle_pivot(conn, schema, table, lexical.mean_length(sample),
                             backfilled=not old_shape and (state is None or state[0]), analysing=True)
    return "", sample


def upgrade(conn, schema: str, table: str, batch_rows: int = BATCH_ROWS) -> int:
    """Bring `table` to today's shape and terms (the module's steps); returns the rows analysed now."""
    started = time.monotonic()
    with conn.transaction():  # the table is locked from the sample on: the first batch is the sample
        after, analysed = _reshape(conn, schema, table, batch_rows)
    t, pivots = sql.Identifier(schema, table), sql.Identifier(schema, "lexical_pivots")
    piv = lexical.pivot(conn, schema, table) or lexical.DEFAULT_PIVOT
    done, told = 0, time.monotonic()
    total = conn.execute(sql.SQL("SELECT count(*) FROM {} WHERE chunk_id > %s").format(t), (after,)).fetchone()[0]
    while True:
        batch = analysed if analysed is not None else _batch(conn, t, after, batch_rows)
        analysed = None
        if not batch.num_rows:
            break
        batch = lexical.fill(batch)
        after = batch.column("chunk_id")[-1].as_py()
        with conn.transaction():
            conn.execute("CREATE TEMP TABLE IF NOT EXISTS lexical_backfill (chunk_id text, lex_terms int4[], "
                         "lex_tfs int4[], lex_length int4, lex sparsevec(1000000000)) ON COMMIT DELETE ROWS")
            with conn.cursor() as cur, cur.copy("COPY lexical_backfill FROM STDIN WITH (FORMAT BINARY)") as copy:
                copy.set_types(["text", "bytea", "bytea", "int4", "bytea"])
                for row in zip(batch.column("chunk_id").to_pylist(), lexical.int4_arrays(batch.column("lex_terms")),
                               lexical.int4_arrays(batch.column("lex_tfs")), batch.column("lex_length").to_pylist(),
                               lexical.sparse_weights(batch, piv)):
                    copy.write_row(row)
            conn.execute(sql.SQL("UPDATE {} c SET lex_terms = b.lex_terms, lex_tfs = b.lex_tfs, "
                                 "lex_length = b.lex_length, lex = b.lex FROM lexical_backfill b "
                                 "WHERE c.chunk_id = b.chunk_id").format(t))
            conn.execute(sql.SQL("UPDATE {} SET analysed_to = %s WHERE chunk_table = %s").format(pivots), (after, table))
        done += batch.num_rows
        if time.monotonic() - told >= PROGRESS_SECONDS:
            told = time.monotonic()
            log.info("%s: terms analysed for %d of %d rows (%.0f%%)", table, done, total, 100 * done / max(total, done))
    conn.execute(sql.SQL("UPDATE {} SET backfilled = true, analysed_to = NULL WHERE chunk_table = %s").format(pivots),
                 (table,))
    lexical.install_triggers(conn, schema, table)
    log.info("%s: terms analysed by analyser version %d outside the database (%d rows, pivot %.1f) in %.1f s",
             table, TERMS_VERSION, done, piv, time.monotonic() - started)
    return done


def ensure_indexes(conn, url: str, schema: str, name: str, table_index, build: tuple[int, int, int],
                   after_load: bool, label: str) -> bool:
    """BM25's indexes on chunk table `name`: GIN over `lex_terms` and HNSW (`build`: m, ef_construction,
    memory MB) over `lex`, once it holds rows; the totals' triggers where it lacks them; after a load
    (`after_load`) the totals folded into one row. `table_index(table, method, column)`: PgStore's
    lookup. True when an index was built now."""
    table = sql.Identifier(schema, name)
    if not lexical.has_triggers(conn, schema, name):
        lexical.install_triggers(conn, schema, name)
    if after_load:
        lexical.fold_totals(conn, schema, name)
    built = False
    n, _ = lexical.totals(conn, schema, name)
    if n and table_index(name, "gin", "lex_terms") is None:
        started = time.monotonic()
        with conn.transaction():
            workers = index_build.use_workers(conn, url)
            conn.execute(sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} USING gin (lex_terms)").format(
                sql.Identifier(index_name(name, "terms")), table))
        log.info("%s: GIN index over the terms built in %.1f s (%d parallel workers)", label,
                 time.monotonic() - started, workers)
        built = True
    if n and table_index(name, "hnsw", "lex") is None:
        # A row's weights hold at most MAX_DIMS non-zeros, 8 bytes each (an index and a float4).
        dims = conn.execute(sql.SQL("SELECT avg(cardinality(lex_terms)) FROM (SELECT lex_terms FROM {} LIMIT 1000) s")
                            .format(table)).fetchone()[0] or 1
        m, ef_construction, memory_mb = build
        index_build.build_hnsw(conn, url, table, index_name(name, "lex"), sql.SQL("lex sparsevec_ip_ops"), n,
                               8 * min(float(dims), MAX_DIMS) + 16, m, ef_construction, memory_mb,
                               f"{label}, BM25 weights")
        built = True
    if built:
        conn.execute(sql.SQL("ANALYZE {}").format(table))  # pg_stats' common terms (jobs/search/bm25.py document_frequencies)
    return built
