"""Chunk rows from an Arrow table into a chunk table by binary COPY, column by column.

The writers' hot path: the table's columns are brought to the types the COPY stream carries (pyarrow's
C code, column at a time: NUL removed from text as `jobs.rows.storable` does, vectors as one float32
matrix), then pgpq encodes them into PostgreSQL's binary COPY format, so no row ever becomes a Python
object on the way. Arrow strings are valid UTF-8, so no lone surrogates remain to replace."""

from __future__ import annotations

import json
from collections.abc import Iterator

import numpy as np
import pgpq
import pyarrow as pa
import pyarrow.compute as pc
from pgpq import encoders
from pgpq import schema as pg
from psycopg import sql

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


# ---- the COPY stream, encoded by pgpq --------------------------------------------------------------
# pgpq (Arrow to PostgreSQL's binary COPY format, in Rust) encodes whole columns at once: the writers'
# hot path used to hand psycopg one Python tuple per row, which cost more client time than the server
# took to store the rows. Types pgpq does not know (pgvector's vector and sparsevec, our int4[] term
# lists) go as bytes already in the column's binary format: a binary COPY field is its length and bytes,
# read by the column's own receive function, whatever the encoder called it.
def _storable_text(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    """A string column with NUL removed (jobs.rows.storable: Arrow strings are valid UTF-8 already)."""
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    arr = arr.cast(pa.string())
    return pc.replace_substring(arr, "\x00", "") if arr.null_count < len(arr) else arr


def _storable_lists(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    """A list<string> column, each element with NUL removed."""
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    arr = arr.cast(pa.list_(pa.string()))
    values = _storable_text(arr.values) if len(arr.values) else arr.values
    return pa.ListArray.from_arrays(arr.offsets, values, mask=arr.is_null())


def vector_bytes(matrix: np.ndarray) -> pa.Array:
    """An (n, d) float32 matrix as pgvector's binary vector per row (vector_send: int16 dimension, int16
    unused, then the float4 values, all big-endian)."""
    n, d = matrix.shape
    out = np.empty((n, 4 + 4 * d), dtype=np.uint8)
    out[:, :4] = np.frombuffer(np.array([d, 0], dtype=">i2").tobytes(), dtype=np.uint8)
    out[:, 4:] = np.ascontiguousarray(matrix, dtype=">f4").view(np.uint8).reshape(n, 4 * d)
    return pa.FixedSizeBinaryArray.from_buffers(pa.binary(4 + 4 * d), n, [None, pa.py_buffer(out.tobytes())])


def encoded_table(table: pa.Table, pivot: float) -> pa.Table:
    """`table`'s chunk rows in CHUNK_COLUMNS order (then `lex`, the weights at `pivot`) as the Arrow
    columns pgpq encodes: strings, lists of strings, integers and booleans as themselves, metadata as a
    string sent as jsonb, and vectors, term lists and weights as bytes in their types' binary format."""
    n = table.num_rows
    ids = table.column("chunk_id").to_pylist() if "embedding" in table.column_names else None
    out: dict[str, pa.Array] = {}
    for name, typ in CHUNK_COLUMNS:
        if name not in table.column_names:
            out[name] = pa.nulls(n, pa.binary() if typ in ("vector", "int4[]") else _ARROW_TYPES[typ])
        elif typ == "vector":
            out[name] = vector_bytes(vectors(table.column(name), ids))
        elif typ == "int4[]":
            out[name] = pa.array(lexical.int4_arrays(table.column(name)), pa.binary())
        elif typ == "text[]":
            out[name] = _storable_lists(table.column(name))
        elif typ in ("text", "jsonb"):
            out[name] = _storable_text(table.column(name))
        else:
            out[name] = table.column(name).combine_chunks().cast(_ARROW_TYPES[typ])
    out["lex"] = pa.array(lexical.sparse_weights(table, pivot), pa.binary())
    return pa.table(out)


def _encoder(schema: pa.Schema) -> pgpq.ArrowToPostgresBinaryEncoder:
    jsonb = {name: encoders.StringEncoderBuilder.new_with_output(schema.field(name), pg.Jsonb())
             for name, typ in CHUNK_COLUMNS if typ == "jsonb"}
    return pgpq.ArrowToPostgresBinaryEncoder.new_with_encoders(
        schema, {**{f.name: pgpq.ArrowToPostgresBinaryEncoder.infer_encoder(f) for f in schema}, **jsonb})


def stream(table: pa.Table, encoder: pgpq.ArrowToPostgresBinaryEncoder | None = None) -> Iterator[bytes]:
    """`table` as a binary COPY stream, piece by piece: the header, its rows a batch at a time, the
    trailer. `encoder`: pgpq's for the table's schema (None: pgpq's own choice for each column)."""
    encoder = encoder or pgpq.ArrowToPostgresBinaryEncoder(table.schema)
    yield encoder.write_header()
    # Batches of a few MB: pgpq writes each batch into one growing buffer, and batches of 5,000 chunk
    # rows (~20 MB) cost more per row than batches of 1,000.
    for batch in table.to_batches(max_chunksize=1000):
        yield encoder.write_batch(batch)
    yield encoder.finish()


def copy_table(conn, target: sql.Composed, table: pa.Table, pivot: float | None = None) -> int:
    """COPY every row of `table` into `target` (a chunk table) with its BM25 weights at `pivot` (the
    table's, jobs/store/lexical.py; None: looked up, or set from these rows if the table has none), and
    the rows counted into BM25's totals (lexical.add_totals); returns the rows written (encoded_table:
    what each column goes out as)."""
    if not table.num_rows:
        return 0
    table = lexical.fill(table)
    schema, name = lexical.table_names(conn, target)
    if pivot is None:
        pivot = lexical.pivot_of(conn, schema, name, table)
    encoded = encoded_table(table, pivot)
    cols = sql.SQL(", ").join(sql.Identifier(c) for c in encoded.column_names)
    stmt = sql.SQL("COPY {} ({}) FROM STDIN WITH (FORMAT BINARY)").format(target, cols)
    with conn.cursor() as cur, cur.copy(stmt) as copy:
        for data in stream(encoded, _encoder(encoded.schema)):
            copy.write(data)
    lengths = table.column("lex_length")
    if "omitted" in table.column_names:  # an omitted chunk is stored but not counted in BM25's totals
        kept = pc.invert(pc.fill_null(table.column("omitted"), False))
        lengths = pc.if_else(kept, lengths, 0)
        counted = pc.sum(pc.cast(kept, pa.int64())).as_py() or 0
    else:
        counted = table.num_rows
    lexical.add_totals(conn, schema, name, counted, pc.sum(lengths).as_py() or 0)
    return table.num_rows
