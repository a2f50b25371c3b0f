"""Data from before text analysis moved onto the workers, or analysed by an earlier analyser: a chunk table
with the generated `tsv` and `lex` columns, or with terms of another TERMS_VERSION, is upgraded on its
next write (jobs/store/lexical_upgrade.py) and answers as a table written today does; Parquet without the
term columns, or of another version, is analysed once by the loader."""

import pyarrow as pa
import pytest
from psycopg import sql

from jobs.load import prepare_part
from jobs.search import NotBuiltError, Searcher
from jobs.search.ranking import search_many
from jobs.store import arrow_copy, lexical, lexical_upgrade
from jobs.store.arrow_copy import CHUNK_COLUMNS
from jobs.store.chunk_view import SQL_TYPES
from jobs.store.parquet import with_current_terms
from jobs.terms import TERMS_VERSION, analyse_chunk
from tests.factories import chunk_row, doc_row, unit_vector
from tests.store.test_lexical import DIM, QUERIES, _paragraphs

# The chunk table's DDL as corpusmill wrote it before this change (jobs/store/pgvector.py, text_search.py
# and lexical.py of that release): the generated full-text column and BM25 weights, their indexes.
OLD_GENERATED = """
    tsv tsvector GENERATED ALWAYS AS (to_tsvector('english', coalesce(breadcrumb, '') || ' ' || coalesce(text, '')))
        STORED,
    lex sparsevec(1000000000) GENERATED ALWAYS AS ({schema}.bm25_document(to_tsvector('english',
        coalesce(breadcrumb, '') || ' ' || coalesce(text, '')), 40.0::float8)) STORED"""
OLD_INDEXES = ["CREATE INDEX {t}_tsv_idx ON {schema}.{t} USING gin (tsv)",
               "CREATE INDEX {t}_lex_idx ON {schema}.{t} USING hnsw (lex sparsevec_ip_ops)"]


def _rows(name: str, docs: int) -> tuple[list[dict], list[dict]]:
    paragraphs = _paragraphs(2 * docs)
    heads = [doc_row(f"{name}-d{i}") for i in range(docs)]
    rows = [chunk_row(h["doc_id"], s, t, unit_vector(i + s, DIM), name)
            for i, h in enumerate(heads) for s, t in enumerate(paragraphs[2 * i:2 * i + 2])]
    return heads, rows


def _old_collection(store, name: str, docs: int = 30):
    """A collection whose chunk table has the old shape, holding `docs` documents."""
    coll = store.ensure_collection(name, "m", DIM)
    t, schema = coll.chunk_table, store.schema
    store.conn.execute(sql.SQL("DROP TABLE {} CASCADE").format(sql.Identifier(schema, t)))  # and the view
    lexical.forget_pivot(store.conn, schema, t)
    old = [(c, typ) for c, typ in CHUNK_COLUMNS if not c.startswith("lex_")]
    cols = ", ".join(f'"{c}" ' + (f"vector({DIM})" if typ == "vector" else SQL_TYPES.get(typ, typ))
                     + (" PRIMARY KEY" if c == "chunk_id" else "") for c, typ in old)
    store.conn.execute(f"CREATE TABLE {schema}.{t} ({cols}, {OLD_GENERATED.format(schema=schema)})")
    with store.conn.transaction():
        store._refresh_view()
    heads, rows = _rows(name, docs)
    store.mark_pending(name, "r1", heads)
    for r in rows:
        store.conn.execute(sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(
            sql.Identifier(schema, t), sql.SQL(", ").join(sql.Identifier(c) for c, _ in old),
            sql.SQL(", ").join(sql.Placeholder() * len(old))),
            [r[c] if c != "metadata" else None for c, _ in old])
    for ddl in OLD_INDEXES:
        store.conn.execute(ddl.format(t=t, schema=schema))
    return coll, heads, rows


def _ranked(store, coll, exact: bool) -> list[list[str]]:
    found = search_many(store, coll, [unit_vector(0, DIM)] * len(QUERIES), 5, queries=QUERIES, mode="text",
                        exact=exact)
    return [[h["chunk_id"] for h in hits] for hits in found]


def test_an_old_table_is_upgraded_on_its_next_write_and_answers_as_a_new_one(store):
    coll, heads, rows = _old_collection(store, "upgrade_old")
    assert lexical_upgrade.needed(store.conn, store.schema, coll.chunk_table)
    assert not store.lexical_ready(coll)
    with pytest.raises(NotBuiltError, match="corpusmill upgrade --collection upgrade_old"):
        Searcher(store, "upgrade_old", mode="hybrid")  # a search changes nothing: it says what will
    assert lexical_upgrade.needed(store.conn, store.schema, coll.chunk_table)
    assert store.ensure_collection("upgrade_old", "m", DIM) == coll  # a write command's first step upgrades
    assert not lexical_upgrade.needed(store.conn, store.schema, coll.chunk_table)
    cols = dict(store.conn.execute(
        "SELECT attname, attgenerated FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attnum > 0 "
        "AND NOT attisdropped", (f"{store.schema}.{coll.chunk_table}",)).fetchall())
    assert "tsv" not in cols and cols["lex"] == "" and {"lex_terms", "lex_tfs", "lex_length"} <= set(cols)
    assert store.ensure_text_index(coll, after_load=True)  # the GIN and HNSW indexes, as after a load
    # The same rows written today, in one commit (so both tables' pivot is the rows' mean length).
    fresh = store.ensure_collection("upgrade_new", "m", DIM)
    store.mark_pending("upgrade_new", "r1", [doc_row(h["doc_id"].replace("old", "new")) for h in heads])
    store.commit_documents(fresh, [doc_row(h["doc_id"].replace("old", "new")) for h in heads],
                           arrow_copy.rows_table([dict(r, doc_id=r["doc_id"].replace("old", "new"),
                                                       chunk_id=r["chunk_id"].replace("old", "new")) for r in rows]),
                           "r1")
    store.ensure_text_index(fresh, after_load=True)
    assert lexical.pivot(store.conn, store.schema, coll.chunk_table) == pytest.approx(
        lexical.pivot(store.conn, store.schema, fresh.chunk_table))
    assert lexical.totals(store.conn, store.schema, coll.chunk_table) == lexical.totals(
        store.conn, store.schema, fresh.chunk_table)
    for exact in (False, True):
        old, new = _ranked(store, coll, exact), _ranked(store, fresh, exact)
        assert [[c.replace("old", "new") for c in r] for r in old] == new
    assert all(_ranked(store, coll, False)[:-1]) and _ranked(store, coll, False)[-1] == []  # `zebra`: none


def _upgrade_cut_after_one_batch(store, coll, monkeypatch):
    """Run the upgrade with batches of 4 until the server goes away after the first batch is written
    (the sample, written as the first batch, then a lost connection); returns the real `_batch` to put back."""
    calls = {"n": 0}
    batch = lexical_upgrade._batch

    def failing(*args):
        calls["n"] += 1
        if calls["n"] == 2:
            raise ConnectionError("gone")
        return batch(*args)

    monkeypatch.setattr(lexical_upgrade, "_batch", failing)
    with pytest.raises(ConnectionError):
        lexical_upgrade.upgrade(store.conn, store.schema, coll.chunk_table, batch_rows=4)
    return batch


def test_an_interrupted_upgrade_resumes_with_the_same_pivot(store, monkeypatch):
    coll, _, rows = _old_collection(store, "upgrade_resume", docs=10)
    batch = _upgrade_cut_after_one_batch(store, coll, monkeypatch)
    assert lexical_upgrade.needed(store.conn, store.schema, coll.chunk_table)
    pivot = lexical.pivot(store.conn, store.schema, coll.chunk_table)
    monkeypatch.setattr(lexical_upgrade, "_batch", batch)
    assert lexical_upgrade.upgrade(store.conn, store.schema, coll.chunk_table, batch_rows=4) == len(rows) - 4
    assert lexical.pivot(store.conn, store.schema, coll.chunk_table) == pivot
    assert not lexical_upgrade.needed(store.conn, store.schema, coll.chunk_table)
    stored = store.conn.execute(sql.SQL("SELECT text, lex_terms, lex_tfs, lex_length FROM {}").format(
        sql.Identifier(store.schema, coll.chunk_table))).fetchall()
    assert len(stored) == len(rows)
    for text, terms, tfs, length in stored:
        assert analyse_chunk("T › H", text) == {"lex_terms": terms, "lex_tfs": tfs, "lex_length": length}


def test_parquet_without_the_term_columns_is_analysed_by_the_loader():
    _, rows = _rows("old_parquet", 3)
    part = pa.Table.from_pylist([{k: v for k, v in r.items() if k not in ("doc_id", "collection")}
                                 for r in rows])
    assert "lex_terms" not in part.column_names
    loaded = prepare_part(part, "old_parquet", set())
    for row in loaded.to_pylist():
        assert {k: row[k] for k in lexical.LEX_COLUMNS} == analyse_chunk(row["breadcrumb"], row["text"])


def _pivot_row(store, table: str) -> tuple:
    return store.conn.execute(sql.SQL("SELECT pivot, terms, analysed_to, backfilled FROM {} WHERE chunk_table = %s")
                              .format(sql.Identifier(store.schema, "lexical_pivots")), (table,)).fetchone()


def test_a_table_of_an_earlier_analyser_is_analysed_again_on_its_next_write(store):
    heads, rows = _rows("terms_v1", 12)
    coll = store.ensure_collection("terms_v1", "m", DIM)
    store.mark_pending("terms_v1", "r1", heads)
    store.commit_documents(coll, heads, arrow_copy.rows_table(rows), "r1")
    store.ensure_text_index(coll, after_load=True)
    before = {exact: _ranked(store, coll, exact) for exact in (False, True)}
    pivot, version, _, _ = _pivot_row(store, coll.chunk_table)
    totals = lexical.totals(store.conn, store.schema, coll.chunk_table)
    assert version == TERMS_VERSION
    # The table as an earlier analyser left it: other terms in every row, its version recorded.
    t = sql.Identifier(store.schema, coll.chunk_table)
    store.conn.execute(sql.SQL("UPDATE {} SET lex_terms = ARRAY[7], lex_tfs = ARRAY[1], lex_length = 1").format(t))
    store.conn.execute(sql.SQL("UPDATE {} SET terms = 1 WHERE chunk_table = %s").format(
        sql.Identifier(store.schema, "lexical_pivots")), (coll.chunk_table,))
    assert lexical_upgrade.needed(store.conn, store.schema, coll.chunk_table)
    assert store.lexical_ready(coll)  # its old terms still answer searches until its next write
    assert store.ensure_collection("terms_v1", "m", DIM) == coll  # a write command's first step analyses again
    assert not lexical_upgrade.needed(store.conn, store.schema, coll.chunk_table)
    assert _pivot_row(store, coll.chunk_table) == (pytest.approx(pivot), TERMS_VERSION, None, True)
    for text, terms, tfs, length in store.conn.execute(sql.SQL("SELECT text, lex_terms, lex_tfs, lex_length FROM {}")
                                                       .format(t)).fetchall():
        assert analyse_chunk("T › H", text) == {"lex_terms": terms, "lex_tfs": tfs, "lex_length": length}
    assert lexical.totals(store.conn, store.schema, coll.chunk_table) == totals
    assert store.ensure_text_index(coll, after_load=True)  # its lexical indexes were dropped: built again
    assert {exact: _ranked(store, coll, exact) for exact in (False, True)} == before


def test_an_interrupted_analysis_resumes_after_its_last_batch(store, monkeypatch):
    heads, rows = _rows("terms_resume", 5)
    coll = store.ensure_collection("terms_resume", "m", DIM)
    store.mark_pending("terms_resume", "r1", heads)
    store.commit_documents(coll, heads, arrow_copy.rows_table(rows), "r1")
    store.conn.execute(sql.SQL("UPDATE {} SET terms = 1 WHERE chunk_table = %s").format(
        sql.Identifier(store.schema, "lexical_pivots")), (coll.chunk_table,))
    batch = _upgrade_cut_after_one_batch(store, coll, monkeypatch)
    _, version, analysed_to, backfilled = _pivot_row(store, coll.chunk_table)
    first_four = sorted(r["chunk_id"] for r in rows)[3]
    assert (version, analysed_to, backfilled) == (TERMS_VERSION, first_four, True)
    assert lexical_upgrade.needed(store.conn, store.schema, coll.chunk_table) and store.lexical_ready(coll)
    monkeypatch.setattr(lexical_upgrade, "_batch", batch)
    assert lexical_upgrade.upgrade(store.conn, store.schema, coll.chunk_table, batch_rows=4) == len(rows) - 4
    assert not lexical_upgrade.needed(store.conn, store.schema, coll.chunk_table)


def test_a_part_of_an_earlier_analyser_is_analysed_again_by_the_loader_and_a_current_one_is_not():
    _, rows = _rows("old_terms", 3)
    bogus = [dict({k: v for k, v in r.items() if k not in ("doc_id", "collection")},
                  lex_terms=[7], lex_tfs=[1], lex_length=1) for r in rows]
    unmarked = pa.Table.from_pylist(bogus)
    for name, typ in (("lex_terms", pa.list_(pa.int32())), ("lex_tfs", pa.list_(pa.int32())), ("lex_length", pa.int32())):
        unmarked = unmarked.set_column(unmarked.column_names.index(name), name, unmarked.column(name).cast(typ))  # as stored
    for row in prepare_part(unmarked, "old_terms", set()).to_pylist():
        assert {k: row[k] for k in lexical.LEX_COLUMNS} == analyse_chunk(row["breadcrumb"], row["text"])
    current = with_current_terms(unmarked)  # as a part written by this release says of itself
    assert all(row["lex_terms"] == [7] for row in prepare_part(current, "old_terms", set()).to_pylist())
    # A reload of runs from before and after the release: a writer joins documents of both kinds of part.
    both = [prepare_part(unmarked, "old_terms", set()), prepare_part(current, "old_terms", set())]
    assert pa.concat_tables(both).num_rows == 2 * len(rows)


def test_an_upgrade_reads_and_analyses_each_row_once(store, monkeypatch):
    """The pivot's sample is the first batch: it is written as analysed, not read and analysed again."""
    coll, _, rows = _old_collection(store, "upgrade_once", docs=10)
    read, batch = [], lexical_upgrade._batch

    def counted(*args):
        out = batch(*args)
        read.extend(out.column("chunk_id").to_pylist())
        return out

    monkeypatch.setattr(lexical_upgrade, "_batch", counted)
    assert lexical_upgrade.upgrade(store.conn, store.schema, coll.chunk_table, batch_rows=4) == len(rows)
    assert sorted(read) == sorted(r["chunk_id"] for r in rows)


def test_an_upgrade_of_a_large_table_says_how_far_it_is(store, monkeypatch, caplog):
    coll, _, rows = _old_collection(store, "upgrade_progress", docs=6)
    monkeypatch.setattr(lexical_upgrade, "PROGRESS_SECONDS", 0.0)
    with caplog.at_level("INFO", logger="jobs.store.lexical_upgrade"):
        lexical_upgrade.upgrade(store.conn, store.schema, coll.chunk_table, batch_rows=4)
    said = [r.getMessage() for r in caplog.records if "terms analysed for" in r.getMessage()]
    assert said[0].endswith(f"terms analysed for 4 of {len(rows)} rows (33%)")
    assert said[-1].endswith(f"terms analysed for {len(rows)} of {len(rows)} rows (100%)")
