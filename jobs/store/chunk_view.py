"""The `all_chunks` view: one view over every collection's active chunk table, so any PostgreSQL client
reads the chunks of every collection as plain rows.

Every command refreshes it (migrate(), and a new collection or active space), so it is written only when
its definition changes — a hash of the definition is the view's comment — since replacing a view takes
an exclusive lock that shuts its readers out until the transaction ends. CREATE OR REPLACE keeps the
view's oid, its grants and the views readers built on it; only a changed column list needs a new view.
"""

from __future__ import annotations

import hashlib

import psycopg
from psycopg import sql

from jobs.store.arrow_copy import CHUNK_COLUMNS

SQL_TYPES = {"int4": "integer", "int8": "bigint", "bool": "boolean"}  # CHUNK_COLUMNS' short names, spelt out
VIEW_COLUMNS = ["collection", "chunk_id", "doc_id", "source_path", "source_type", "heading_path",
                "breadcrumb", "text", "seq", "char_start", "char_end", "sheet", "row", "quality", "embedding_model",
                "metadata"]


def definition(tables: list[str], schema: str) -> sql.Composed:
    """The view's query over chunk tables `tables`; with none, an empty one of the same columns and types."""
    if tables:
        cols = sql.SQL(", ").join(sql.Identifier(c) for c in VIEW_COLUMNS)
        return sql.SQL(" UNION ALL ").join(
            sql.SQL("SELECT {} FROM {}").format(cols, sql.Identifier(schema, t)) for t in tables)
    types = dict(CHUNK_COLUMNS)
    return sql.SQL("SELECT {} WHERE false").format(sql.SQL(", ").join(
        sql.SQL("NULL::{} AS {}").format(sql.SQL(SQL_TYPES.get(types[c], types[c])), sql.Identifier(c))
        for c in VIEW_COLUMNS))


def refresh(conn: psycopg.Connection, schema: str) -> None:
    """Bring the view up to the collections table, inside the caller's transaction."""
    # Two new collections at once: the second reads the collections after the first one's commit.
    conn.execute("SELECT pg_advisory_xact_lock(hashtext('corpusmill-view'))")
    tables = [r[0] for r in conn.execute(
        sql.SQL("SELECT chunk_table FROM {} ORDER BY name").format(sql.Identifier(schema, "collections")))]
    body, view = definition(tables, schema), sql.Identifier(schema, "all_chunks")
    tag = "corpusmill all_chunks " + hashlib.sha256(body.as_string(conn).encode()).hexdigest()[:16]
    now = conn.execute("SELECT obj_description(to_regclass(%s), 'pg_class')", (view.as_string(conn),)).fetchone()[0]
    if now == tag:
        return
    try:
        with conn.transaction():  # a savepoint: a replace PostgreSQL refuses falls back below
            conn.execute(sql.SQL("CREATE OR REPLACE VIEW {} AS {}").format(view, body))
    except psycopg.errors.InvalidTableDefinition:  # a column renamed, dropped or retyped
        conn.execute(sql.SQL("DROP VIEW {}").format(view))
        conn.execute(sql.SQL("CREATE VIEW {} AS {}").format(view, body))
    conn.execute(sql.SQL("COMMENT ON VIEW {} IS {}").format(view, sql.Literal(tag)))
