"""BM25's write side: what each chunk table keeps so that a query's BM25 ranking goes through indexes and
its cost depends on the query and k, not on the collection's size (the query side: jobs/search/bm25.py).

The text is analysed once, on the Ray workers, by jobs/terms.py: each chunk row carries its term ids
(`lex_terms`, sorted), their frequencies (`lex_tfs`) and its length in distinct terms (`lex_length`), and the
writers COPY them as plain columns. The database does no text work on the write path: no generated
column, no per-row function. What the store keeps per chunk table:

- `lex_terms` under a GIN index (int4[]): a term few chunks hold (jobs/search/bm25.py RARE_DF) finds all
  of them there (exact, and few), and its document frequency is counted through it;
- `lex`, the chunk's BM25 document weights as a pgvector `sparsevec` (one dimension per term id, the
  1,000 heaviest at most: an HNSW index takes no more), computed here in numpy as the rows are COPYed,
  under an HNSW index for inner product. A query is the sparse vector of its terms' idf, so the inner
  product is the chunk's BM25 score; the graph walk finds the chunks that share the query's common
  words (for a word only a handful of chunks hold it can start on chunks that share nothing with the
  query and never reach them, which is why rare words take the GIN path).

Length normalisation is BM25's, tf (k1 + 1) / (tf + k1 (1 - b + b dl / pivot)), with one pivot per
chunk table: the mean length of the first batch committed into the empty table (a few hundred chunks
of a run, or a sample of the whole table when an older table is upgraded), kept in `lexical_pivots`
and fixed from then on, so no write ever rewrites the table (the pivot of pivoted length normalisation
need only be near the mean length, and a table's mean moves little once it holds a run). Exact BM25
(`--exact`, jobs/search/bm25.py) uses the same pivot, so indexed and exact scores agree up to float32
rounding. `lexical_pivots` also records which version of the analyser made the table's terms
(jobs/terms.py TERMS_VERSION): a table of another version is analysed again on its next write.

The query side uses the current N: `lexical_totals`, which statement triggers keep as commits write
(they count rows and sum `lex_length`, no text work); `totals` reads it.
"""

from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from psycopg import sql

from jobs.errors import DataFault
from jobs.terms import DIMENSION, MAX_DIMS, TERMS_VERSION, analyse_chunk, bm25_weights

DEFAULT_PIVOT = 40.0  # the pivot of a table no commit has set one for yet (an empty table)
LEX_COLUMNS = ("lex_terms", "lex_tfs", "lex_length")
_INT4_OID = 23


class BadTerms(DataFault):
    """A chunk whose lexical columns are not what jobs/terms.py makes (unsorted or unequal lists)."""


# ---- the write side: the rows' lexical columns, packed for binary COPY ------------------------------
def fill(table: pa.Table) -> pa.Table:
    """`table` with its lexical columns analysed where they are missing or null: rows from before the
    analysis was part of the chunk contract (older Parquet), or from a tool that built rows by hand."""
    have = all(c in table.column_names for c in LEX_COLUMNS)
    if have and not any(table.column(c).null_count for c in LEX_COLUMNS):
        return table
    crumbs = table.column("breadcrumb").to_pylist() if "breadcrumb" in table.column_names else [None] * table.num_rows
    texts = table.column("text").to_pylist()
    old = {c: table.column(c).to_pylist() for c in LEX_COLUMNS} if have else None
    out: dict[str, list] = {c: [] for c in LEX_COLUMNS}
    for i, (crumb, text) in enumerate(zip(crumbs, texts)):
        if old is not None and all(old[c][i] is not None for c in LEX_COLUMNS):
            row = {c: old[c][i] for c in LEX_COLUMNS}
        else:
            row = analyse_chunk(crumb, text)
        for c in LEX_COLUMNS:
            out[c].append(row[c])
    types = {"lex_terms": pa.list_(pa.int32()), "lex_tfs": pa.list_(pa.int32()), "lex_length": pa.int32()}
    for c in LEX_COLUMNS:
        values = pa.array(out[c], types[c])
        table = table.set_column(table.column_names.index(c), c, values) if c in table.column_names \
            else table.append_column(c, values)
    return table


def mean_length(table: pa.Table) -> float:
    """The rows' mean length in terms (a pivot for a table that has none yet)."""
    if not table.num_rows:
        return DEFAULT_PIVOT
    return float(pc.mean(table.column("lex_length")).as_py() or 0.0) or 1.0


def _lists(column: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """A list<int32> column as (flat values, offsets)."""
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    offsets = np.asarray(arr.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
    values = np.asarray(arr.values.to_numpy(zero_copy_only=False), dtype=np.int64)
    return values[offsets[0]:offsets[-1]], offsets - offsets[0]


def int4_arrays(column: pa.ChunkedArray | pa.Array) -> list[bytes]:
    """Each row's list as PostgreSQL's binary int4[] (array_send: dimensions, flags, element type, each
    dimension's length and lower bound, then a length and a value per element), built with numpy."""
    values, offsets = _lists(column)
    pairs = np.empty((len(values), 2), dtype=">i4")
    pairs[:, 0], pairs[:, 1] = 4, values
    flat = pairs.tobytes()
    empty = struct.pack(">iii", 0, 0, _INT4_OID)
    out = []
    for start, end in zip(offsets[:-1].tolist(), offsets[1:].tolist()):
        n = end - start
        out.append(struct.pack(">iiiii", 1, 0, _INT4_OID, n, 1) + flat[8 * start:8 * end] if n else empty)
    return out


def sparse_weights(table: pa.Table, pivot: float) -> list[bytes]:
    """Each row's BM25 document weights at `pivot` as pgvector's binary sparsevec (sparsevec_send: the
    dimension, the non-zeros, 0, then the 0-based indices and the float4 values), its MAX_DIMS heaviest
    when it has more terms."""
    terms, offsets = _lists(table.column("lex_terms"))
    tfs, tf_offsets = _lists(table.column("lex_tfs"))
    if not np.array_equal(offsets, tf_offsets):
        raise BadTerms("lex_terms and lex_tfs hold lists of unequal length")
    lengths = np.asarray(table.column("lex_length").to_numpy(zero_copy_only=False), dtype=np.float64)
    counts = np.diff(offsets)
    steps = np.diff(terms)
    inner = np.ones(len(steps), dtype=bool)
    starts = offsets[1:-1]  # where each row after the first begins; a step across two rows may go down
    inner[starts[(starts > 0) & (starts < len(terms))] - 1] = False  # (rows without terms at either end: none)
    if len(terms) and (terms.min() < 1 or terms.max() > DIMENSION or (steps[inner] <= 0).any()):
        raise BadTerms("lex_terms must be sorted distinct term ids in 1 .. 10^9 (jobs/terms.py)")
    weights = bm25_weights(tfs, np.repeat(lengths, counts), pivot).astype(">f4")
    indices = (terms - 1).astype(">i4")
    flat_w, flat_i = weights.tobytes(), indices.tobytes()
    out = []
    for start, end in zip(offsets[:-1].tolist(), offsets[1:].tolist()):
        n = end - start
        if n <= MAX_DIMS:
            out.append(struct.pack(">iii", DIMENSION, n, 0) + flat_i[4 * start:4 * end] + flat_w[4 * start:4 * end])
            continue
        w = weights[start:end].astype(np.float64)
        keep = np.sort(np.lexsort((indices[start:end], -w))[:MAX_DIMS])  # heaviest, then lowest id; in id order
        out.append(struct.pack(">iii", DIMENSION, MAX_DIMS, 0) + indices[start:end][keep].tobytes()
                   + weights[start:end][keep].tobytes())
    return out


# ---- the pivot --------------------------------------------------------------------------------------
def pivot(conn, schema: str, table: str) -> float | None:
    """The table's pivot (None: no commit has set one yet)."""
    row = conn.execute(sql.SQL("SELECT pivot FROM {} WHERE chunk_table = %s").format(
        sql.Identifier(schema, "lexical_pivots")), (table,)).fetchone()
    return float(row[0]) if row else None


def settle_pivot(conn, schema: str, table: str, mean: float, backfilled: bool = True,
                 analysing: bool = False) -> float:
    """The table's pivot: `mean` if this is the first call for the table, else the one set before (two
    first commits at once: the second waits on the first's row and takes its pivot). The row records
    that this release's analyser (TERMS_VERSION) makes the table's terms; `backfilled` false: its rows
    have no terms yet, `analysing`: its rows are being analysed again (jobs/store/lexical_upgrade.py)."""
    pivots = sql.Identifier(schema, "lexical_pivots")
    conn.execute(sql.SQL("INSERT INTO {} (chunk_table, pivot, backfilled, terms, analysed_to) VALUES (%s, %s, %s, %s, %s) "
                         "ON CONFLICT (chunk_table) DO NOTHING").format(pivots),
                 (table, round(max(mean, 1.0), 3), backfilled, TERMS_VERSION, "" if analysing else None))
    return pivot(conn, schema, table)


def pivot_of(conn, schema: str, table: str, rows: pa.Table) -> float:
    """The table's pivot, or settle_pivot from `rows` if it has none yet."""
    return pivot(conn, schema, table) or settle_pivot(conn, schema, table, mean_length(rows))


def copy_pivot(conn, schema: str, source: str, target: str) -> None:
    """`target` takes `source`'s pivot and terms version (a new embedding space of a collection: its rows
    and weights are copied from the active space's, jobs/store/spaces.py)."""
    conn.execute(sql.SQL("INSERT INTO {p} (chunk_table, pivot, terms) SELECT %s, pivot, terms FROM {p} "
                         "WHERE chunk_table = %s "
                         "ON CONFLICT (chunk_table) DO UPDATE SET pivot = EXCLUDED.pivot, terms = EXCLUDED.terms").format(
        p=sql.Identifier(schema, "lexical_pivots")), (target, source))


def forget_pivot(conn, schema: str, table: str) -> None:
    """A table made anew starts without a pivot (its first commit sets one)."""
    conn.execute(sql.SQL("DELETE FROM {} WHERE chunk_table = %s").format(sql.Identifier(schema, "lexical_pivots")),
                 (table,))


# ---- N and the mean length, kept by triggers ---------------------------------------------------------
def install_triggers(conn, schema: str, table: str) -> None:
    """Statement triggers that keep `lexical_totals` for what leaves or changes in `table` (migration
    011's lexical_count: rows and the sum of `lex_length`), seeded from one scan of it (the table locked
    against writers meanwhile, so no statement is counted twice or missed). What COPY adds is counted by
    the writer itself (add_totals, from the rows it sends): an INSERT trigger's transition table would
    hold a copy of every row written, a fifth of a load's COPY time."""
    t = sql.Identifier(schema, table)
    fn = sql.Identifier(schema, "lexical_count")
    totals_t = sql.Identifier(schema, "lexical_totals")
    with conn.transaction():
        conn.execute(sql.SQL("LOCK TABLE {} IN SHARE ROW EXCLUSIVE MODE").format(t))
        conn.execute(sql.SQL("DROP TRIGGER IF EXISTS lexical_insert ON {}").format(t))
        for op, ref in (("DELETE", "OLD TABLE AS old_rows"), ("UPDATE", "OLD TABLE AS old_rows NEW TABLE AS new_rows")):
            conn.execute(sql.SQL("CREATE OR REPLACE TRIGGER {} AFTER {} ON {} REFERENCING {} FOR EACH STATEMENT "
                                 "EXECUTE FUNCTION {}()").format(
                sql.Identifier(f"lexical_{op.lower()}"), sql.SQL(op), t, sql.SQL(ref), fn))
        conn.execute(sql.SQL("CREATE OR REPLACE TRIGGER lexical_truncate AFTER TRUNCATE ON {} FOR EACH STATEMENT "
                             "EXECUTE FUNCTION {}()").format(t, fn))
        conn.execute(sql.SQL("DELETE FROM {} WHERE chunk_table = %s").format(totals_t), (table,))
        conn.execute(sql.SQL("INSERT INTO {} SELECT %s, count(*), coalesce(sum(lex_length), 0) FROM {} "
                             "WHERE NOT coalesce(omitted, false)").format(totals_t, t), (table,))


def has_triggers(conn, schema: str, table: str) -> bool:
    """Whether `table` has today's triggers (an older table's INSERT trigger counts against it)."""
    names = {r[0] for r in conn.execute(
        "SELECT g.tgname FROM pg_trigger g JOIN pg_class c ON c.oid = g.tgrelid JOIN pg_namespace n "
        "ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = %s AND g.tgname LIKE 'lexical\\_%%'",
        (schema, table))}
    return names == {"lexical_delete", "lexical_update", "lexical_truncate"}


def add_totals(conn, schema: str, table: str, chunks: int, length: int) -> None:
    """Rows a writer added to `table` (`chunks` not omitted, `length` their summed lex_length), in its
    transaction: one appended row of `lexical_totals`, as the triggers append theirs."""
    if chunks:
        conn.execute(sql.SQL("INSERT INTO {} VALUES (%s, %s, %s)").format(sql.Identifier(schema, "lexical_totals")),
                     (table, chunks, length))


def table_names(conn, target: sql.Composable) -> tuple[str, str]:
    """(schema, table) of a chunk table given by its identifier."""
    return conn.execute("SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                        "WHERE c.oid = to_regclass(%s)", (target.as_string(conn),)).fetchone()


def totals(conn, schema: str, table: str) -> tuple[int, float]:
    """BM25's N and mean length in terms, as the triggers keep them (no scan of the chunk table)."""
    n, lexemes = conn.execute(sql.SQL("SELECT coalesce(sum(chunks), 0), coalesce(sum(lexemes), 0) FROM {} "
                                      "WHERE chunk_table = %s").format(sql.Identifier(schema, "lexical_totals")),
                              (table,)).fetchone()
    return int(n), (float(lexemes) / int(n) if n else 1.0)


def fold_totals(conn, schema: str, table: str) -> None:
    """The statements' rows folded into one (after a load), so reading the totals stays one row's work.
    Rows a concurrent writer adds meanwhile are not in this snapshot's DELETE and stay as they are."""
    totals_t = sql.Identifier(schema, "lexical_totals")
    with conn.transaction():
        conn.execute(sql.SQL(
            "WITH gone AS (DELETE FROM {} WHERE chunk_table = %s RETURNING chunks, lexemes) "
            "INSERT INTO {} SELECT %s, sum(chunks), sum(lexemes) FROM gone HAVING count(*) > 0").format(
            totals_t, totals_t), (table, table))
