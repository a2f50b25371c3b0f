"""Chunk rows from an Arrow table into a chunk table by binary COPY, column by column.

The writers' hot path: each column is converted once (pyarrow's C code: `to_pylist` per column, the
vectors as one float32 matrix read from the list column's value buffer), and each row goes out as a
tuple of those values, so no row ever becomes a Python dict. Values get what `jobs.rows.storable`
gives a row: NUL removed from text (Arrow strings are valid UTF-8, so no lone surrogates remain).
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from psycopg import sql
from psycopg.types.json import Jsonb

from jobs.errors import DataFault
from jobs.rows import storable
from jobs.store import lexical

# Binary COPY column types, in contract order: every contract column is stored.
CHUNK_COLUMNS: list[tuple[str, str]] = [
    ("chunk_id", "text"), ("collection", "text"), ("doc_id", "text"), ("source_path", "text"),
    ("source_type", "text"), ("heading_path", "text[]"), ("breadcrumb", "text"), ("text", "text"),
    ("embed_text", "text"), ("seq", "int4"), ("char_start", "int8"), ("char_end", "int8"),
    ("sheet", "text"), ("row", "int8"), ("tags", "text[]"), ("token_count", "int4"),
    ("word_count", "int4"), ("quality", "text"), ("omitted", "bool"), ("omit_reason", "text"),
    ("text_sha256", "text"), ("pipeline_fingerprint", "text"), ("run_id", "text"),
    ("embedding", "vector"), ("embedding_model", "text"), ("metadata", "jsonb"),
    ("lex_terms", "int4[]"), ("lex_tfs", "int4[]"), ("lex_length", "int4"),
]


_ARROW_TYPES = {"text": pa.string(), "text[]": pa.list_(pa.string()), "int4": pa.int32(), "int8": pa.int64(),
                "bool": pa.bool_(), "vector": pa.list_(pa.float32()), "jsonb": pa.string(),
                "int4[]": pa.list_(pa.int32())}


def rows_table(rows: list[dict]) -> pa.Table:
    """Chunk row dicts as the table copy_table takes (a single document's commit, tests, tools)."""
    schema = pa.schema([(name, _ARROW_TYPES[typ]) for name, typ in CHUNK_COLUMNS])
    text = {name for name, typ in CHUNK_COLUMNS if typ.startswith("text")}
    return pa.Table.from_pylist([{name: storable(r.get(name)) if name in text else _json_text(r.get(name))
                                  if name == "metadata" else r.get(name) for name in schema.names}
                                 for r in rows], schema=schema)


def selected(columns: list[str], alias: str | None = None) -> sql.Composable:
    """A SELECT list of chunk columns that reads each back as the chunk row holds it: jsonb as JSON text
    (psycopg would give a dict, which the row's Arrow string column does not take)."""
    types = dict(CHUNK_COLUMNS)
    out = []
    for c in columns:
        ref = sql.Identifier(alias, c) if alias else sql.Identifier(c)
        out.append(sql.SQL("{}::text AS {}").format(ref, sql.Identifier(c)) if types.get(c) == "jsonb" else ref)
    return sql.SQL(", ").join(out)


def _json_text(value) -> str | None:
    """Metadata as JSON text: as a chunk row carries it, or as psycopg reads a jsonb column back (a dict)."""
    return value if value is None or isinstance(value, str) else json.dumps(value, ensure_ascii=False)


class UnloadableChunk(DataFault):
    """A chunk the store cannot take (no vector, vectors of unequal length): its document fails at `load`."""


def vectors(column: pa.ChunkedArray | pa.Array, ids: list) -> np.ndarray:
    """The embedding column as an (n, dimension) float32 matrix. A missing vector is an UnloadableChunk naming
    its chunk: a chunk reaches the store only embedded."""
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if arr.null_count:
        missing = ids[arr.is_null().to_pylist().index(True)]
        raise UnloadableChunk(f"chunk {missing} reached the sink without an embedding")
    n = len(arr)
    if n and not pa.types.is_fixed_size_list(arr.type):
        lengths = pc.list_value_length(arr)
        if pc.min(lengths).as_py() != pc.max(lengths).as_py():
            raise UnloadableChunk(f"embedding column of {n} rows holds vectors of unequal length")
    flat = np.asarray(arr.flatten().to_numpy(zero_copy_only=False), dtype=np.float32)
    return flat.reshape(n, flat.size // n if n else 0)


def _text(column: pa.ChunkedArray) -> list:
    if pa.types.is_list(column.type) or pa.types.is_large_list(column.type):
        return [storable(v) for v in column.to_pylist()]  # rare, short lists: the row-wise rule is cheap
    if column.null_count == len(column):
        return [None] * len(column)
    return pc.replace_substring(column, "\x00", "").to_pylist()


def _verbatim(text: str) -> str:
    return text


def _json(column: pa.ChunkedArray) -> list:
    """JSON text as jsonb values, sent as they are (jobs/chunks/metadata.py made them), not parsed and dumped again."""
    return [None if v is None else Jsonb(v, dumps=_verbatim) for v in column.to_pylist()]


def columns(table: pa.Table) -> list[list]:
    """The table's values in CHUNK_COLUMNS order, one Python list per column."""
    ids = table.column("chunk_id").to_pylist()
    out = []
    for name, typ in CHUNK_COLUMNS:
        if name not in table.column_names:
            out.append([None] * table.num_rows)
        elif typ == "vector":
            out.append(list(vectors(table.column(name), ids)))
        elif typ.startswith("text"):
            out.append(ids if name == "chunk_id" else _text(table.column(name)))
        elif typ == "jsonb":
            out.append(_json(table.column(name)))
        elif typ == "int4[]":  # as bytes: PostgreSQL's binary array (copy_table)
            out.append(lexical.int4_arrays(table.column(name)))
        else:
            out.append(table.column(name).to_pylist())
    return out


def copy_table(conn, target: sql.Composed, table: pa.Table, pivot: float | None = None) -> int:
    """COPY every row of `table` into `target` (a chunk table) with its BM25 weights at `pivot` (the
    table's, jobs/store/lexical.py; None: looked up, or set from these rows if the table has none), and
    the rows counted into BM25's totals (lexical.add_totals); returns the rows written. The term lists and the weights go out as
    bytes packed with numpy in PostgreSQL's and pgvector's binary formats (a binary COPY field is its
    length and bytes, which the server reads with the column's own receive function)."""
    if not table.num_rows:
        return 0
    table = lexical.fill(table)
    schema, name = lexical.table_names(conn, target)
    if pivot is None:
        pivot = lexical.pivot_of(conn, schema, name, table)
    names = [c for c, _ in CHUNK_COLUMNS] + ["lex"]
    cols = sql.SQL(", ").join(sql.Identifier(c) for c in names)
    stmt = sql.SQL("COPY {} ({}) FROM STDIN WITH (FORMAT BINARY)").format(target, cols)
    values = columns(table)
    values.append(lexical.sparse_weights(table, pivot))
    with conn.cursor() as cur, cur.copy(stmt) as copy:
        copy.set_types(["bytea" if t == "int4[]" else t for _, t in CHUNK_COLUMNS] + ["bytea"])
        for row in zip(*values):
            copy.write_row(row)
    kept = pc.invert(pc.fill_null(table.column("omitted"), False)) if "omitted" in table.column_names else None
    counted = table.filter(kept) if kept is not None else table
    lexical.add_totals(conn, schema, name, counted.num_rows, pc.sum(counted.column("lex_length")).as_py() or 0)
    return table.num_rows
