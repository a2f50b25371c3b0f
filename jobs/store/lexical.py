"""BM25 through indexes, so a query's cost depends on the query and k, not on the collection's size.

Exact BM25 (jobs/store/text_search.py) scores every chunk that shares a word with the query: a common
word makes that most of the table. Here each chunk table carries its BM25 document weights as a pgvector
`sparsevec` (the generated column `lex`, one dimension per lexeme; migration 007), and a query is the
sparse vector of its lexemes' idf: their inner product is the chunk's BM25 score. Two indexes find the
candidates, each where it is sound:

- a lexeme at most RARE_DF chunks hold: all of them, through the GIN index on `tsv` (exact, and few);
- the rest: the HNSW index on `lex` (inner product), pgvector's own graph search. A graph walk finds
  chunks that share the query's common words; for a word only a handful of chunks hold it can start
  on chunks that share nothing with the query and never reach them, which is why rare words take the
  first path.

Scores are the sparse inner product. The document side's length normalisation uses the table's pivot
(its mean length when the weights were last computed, `reconcile_pivot`), the query side the current
N and document frequencies: N and the mean length from `lexical_totals`, which statement triggers keep
as commits write (never a scan per query); a word's document frequency counted through the GIN index
when it is rare, else estimated from PostgreSQL's own statistics of the column (`pg_stats`'
most common elements, which ANALYZE keeps). While the pivot is the mean length, scores equal exact
BM25 (`--exact`) up to float32 rounding.
"""

from __future__ import annotations

import logging
import math
import re
import time

from psycopg import sql

log = logging.getLogger(__name__)

K1, B = 1.2, 0.75  # as in bm25_document (migration 007) and exact BM25 (text_search.py)
RARE_DF = 1000  # a lexeme in at most this many chunks: its chunks are candidates through GIN
DEFAULT_PIVOT = 40.0  # a new table's pivot until its first load says what its mean length is
PIVOT_DRIFT = 0.2  # the weights are recomputed when the mean length moves this far from the pivot
# HNSW candidates for the sparse ranking (at least its depth): a graph over sparse vectors walks
# plateaus of equal (zero) scores, and a deeper candidate list finds more of exact BM25's first hits
# for common words at about the same cost (docs/benchmarks.md, Scale).
SPARSE_EF_SEARCH = 400


def column(schema: str, pivot: float, config: str) -> sql.Composable:
    """The generated column's definition: the chunk's BM25 weights at `pivot`."""
    return sql.SQL("lex sparsevec(1000000000) GENERATED ALWAYS AS ({}) STORED").format(
        _expression(schema, pivot, config))


def _expression(schema: str, pivot: float, config: str) -> sql.Composable:
    return sql.SQL("{}(to_tsvector({}, coalesce(breadcrumb, '') || ' ' || coalesce(text, '')), {}::float8)").format(
        sql.Identifier(schema, "bm25_document"), sql.Literal(config), sql.Literal(float(round(pivot, 3))))


def install_triggers(conn, schema: str, table: str) -> None:
    """Statement triggers that keep `lexical_totals` for `table`, seeded from one scan of it (the table
    locked against writers meanwhile, so no statement is counted twice or missed)."""
    t = sql.Identifier(schema, table)
    fn = sql.Identifier(schema, "lexical_count")
    totals = sql.Identifier(schema, "lexical_totals")
    with conn.transaction():
        conn.execute(sql.SQL("LOCK TABLE {} IN SHARE ROW EXCLUSIVE MODE").format(t))
        for op, ref in (("INSERT", "NEW TABLE AS new_rows"), ("DELETE", "OLD TABLE AS old_rows"),
                        ("UPDATE", "OLD TABLE AS old_rows NEW TABLE AS new_rows")):
            conn.execute(sql.SQL("CREATE OR REPLACE TRIGGER {} AFTER {} ON {} REFERENCING {} FOR EACH STATEMENT "
                                 "EXECUTE FUNCTION {}()").format(
                sql.Identifier(f"lexical_{op.lower()}"), sql.SQL(op), t, sql.SQL(ref), fn))
        conn.execute(sql.SQL("CREATE OR REPLACE TRIGGER lexical_truncate AFTER TRUNCATE ON {} FOR EACH STATEMENT "
                             "EXECUTE FUNCTION {}()").format(t, fn))
        conn.execute(sql.SQL("DELETE FROM {} WHERE chunk_table = %s").format(totals), (table,))
        conn.execute(sql.SQL("INSERT INTO {} SELECT %s, count(*), coalesce(sum(length(tsv)), 0) FROM {} "
                             "WHERE NOT coalesce(omitted, false)").format(totals, t), (table,))


def has_triggers(conn, schema: str, table: str) -> bool:
    return conn.execute(
        "SELECT count(*) FROM pg_trigger g JOIN pg_class c ON c.oid = g.tgrelid JOIN pg_namespace n "
        "ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = %s AND g.tgname LIKE 'lexical\\_%%'",
        (schema, table)).fetchone()[0] >= 4


def totals(conn, schema: str, table: str) -> tuple[int, float]:
    """BM25's N and mean length in lexemes, as the triggers keep them (no scan of the chunk table)."""
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


def pivot(conn, schema: str, table: str) -> float | None:
    """The pivot the table's `lex` column is computed with, read from the column's expression."""
    row = conn.execute(
        "SELECT pg_get_expr(d.adbin, d.adrelid) FROM pg_attrdef d JOIN pg_attribute a ON a.attrelid = d.adrelid "
        "AND a.attnum = d.adnum JOIN pg_class c ON c.oid = d.adrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relname = %s AND a.attname = 'lex'", (schema, table)).fetchone()
    if not row:
        return None
    return float(re.findall(r"\d+(?:\.\d+)?", row[0].rsplit(",", 1)[-1])[0])


def reconcile_pivot(conn, schema: str, table: str, config: str, drift: float = PIVOT_DRIFT) -> bool:
    """Recompute the weights at the table's current mean length when it has moved more than `drift`
    (a fraction) from the pivot: the first load of a new table, or a collection whose chunks changed
    size. A rewrite of the table (ALTER COLUMN … SET EXPRESSION), so it runs before the indexes are
    built where it can. True when it rewrote."""
    current = pivot(conn, schema, table)
    n, mean = totals(conn, schema, table)
    if current is None or n == 0 or abs(mean / current - 1) <= drift:
        return False
    started = time.monotonic()
    conn.execute(sql.SQL("ALTER TABLE {} ALTER COLUMN lex SET EXPRESSION AS ({})").format(
        sql.Identifier(schema, table), _expression(schema, mean, config)))
    log.info("%s: BM25 weights recomputed for a mean length of %.1f lexemes (were at %.1f) in %.1f s",
             table, mean, current, time.monotonic() - started)
    return True


def _common(conn, schema: str, table: str) -> dict[str, float]:
    """PostgreSQL's most common lexemes of the table's `tsv` with the share of rows holding each (ANALYZE's)."""
    row = conn.execute("SELECT most_common_elems::text::text[], most_common_elem_freqs FROM pg_stats "
                       "WHERE schemaname = %s AND tablename = %s AND attname = 'tsv'", (schema, table)).fetchone()
    if not row or not row[0]:
        return {}
    return dict(zip(row[0], row[1]))


def document_frequencies(conn, schema: str, table: str, lexemes: list[str], n: int) -> dict[str, int]:
    """How many chunks hold each lexeme: ANALYZE's estimate for the common ones (it would take a count of
    a large part of the table), a count through the GIN index for the rest."""
    common = _common(conn, schema, table)
    out: dict[str, int] = {}
    t = sql.Identifier(schema, table)
    for lexeme in lexemes:
        estimate = common.get(lexeme, 0.0) * n
        if estimate > RARE_DF:
            out[lexeme] = round(estimate)
        else:
            out[lexeme] = conn.execute(sql.SQL("SELECT count(*) FROM {} WHERE tsv @@ %s::tsquery").format(t),
                                       (_quoted(lexeme),)).fetchone()[0]
    return out


def _quoted(lexeme: str) -> str:
    return "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'"


def idf(df: int, n: int) -> float:
    return math.log(1 + (n - df + 0.5) / (df + 0.5))


def scores(conn, schema: str, table: str, query: str, limit: int, config: str,
           where: sql.Composable | None = None) -> list[tuple[str, float]]:
    """(chunk id, BM25 score), best first, at most `limit`: candidates through the two indexes, scored by
    the sparse inner product, among the chunks `where` admits (a filter's condition; N and df stay the
    collection's). The caller's transaction may set hnsw.ef_search; it is raised to `limit`."""
    cond = sql.SQL("TRUE") if where is None else where
    lexemes = [r[0] for r in conn.execute("SELECT DISTINCT lexeme FROM unnest(to_tsvector(%s::regconfig, %s))",
                                          (config, query))]
    if not lexemes:
        return []
    n, _ = totals(conn, schema, table)
    if n == 0:
        return []
    df = document_frequencies(conn, schema, table, lexemes, n)
    weights = {lx: idf(f, n) for lx, f in df.items() if f > 0}
    if not weights:
        return []
    t = sql.Identifier(schema, table)
    q = conn.execute(sql.SQL(
        "SELECT ('{{' || string_agg(d || ':' || w, ',') || '}}/1000000000')::sparsevec FROM ("
        "SELECT {}(l) AS d, sum(w)::real AS w FROM unnest(%s::text[], %s::float8[]) AS u(l, w) GROUP BY 1) s").format(
        sql.Identifier(schema, "lexeme_dimension")), (list(weights), list(weights.values()))).fetchone()[0]
    found: dict[str, float] = {}
    # This query's own candidate depth; the caller's setting (a vector ranking's) is put back after it.
    ef = conn.execute("SELECT current_setting('hnsw.ef_search', true)").fetchone()[0]
    wanted = max(limit, SPARSE_EF_SEARCH)
    if not ef or int(ef) < wanted:
        conn.execute(sql.SQL("SET LOCAL hnsw.ef_search = {}").format(sql.Literal(wanted)))
    rows = conn.execute(sql.SQL("SELECT chunk_id, -(lex <#> %(q)s) FROM {} WHERE {} ORDER BY lex <#> %(q)s "
                                "LIMIT %(lim)s").format(t, cond),
                        {"q": q, "lim": limit}).fetchall()
    if ef and int(ef) < wanted:
        conn.execute(sql.SQL("SET LOCAL hnsw.ef_search = {}").format(sql.Literal(int(ef))))
    for chunk, score in rows:
        if score > 0:
            found[chunk] = float(score)
    rare = [lx for lx, f in df.items() if 0 < f <= RARE_DF]
    if rare:
        for chunk, score in conn.execute(sql.SQL(
                "SELECT chunk_id, -(lex <#> %s) FROM {} WHERE tsv @@ %s::tsquery AND ({})").format(t, cond),
                (q, " | ".join(_quoted(lx) for lx in rare))):
            found[chunk] = float(score)
    return sorted(found.items(), key=lambda item: (-item[1], item[0]))[:limit]
