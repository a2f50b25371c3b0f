"""Row shapes that flow between stages, as Arrow schemas (the chunk row is a contract: DESIGN §3).

Every stage passes rows it cannot handle (errors, other source types) through unchanged, so one
broken file becomes one `error` row that reaches the sink, which records it; every other file lands.

`row_kind` says what a chunk-schema row is:
  chunk   a real chunk (embedded unless `omitted`)
  empty   the document produced no chunks; still committed, so it is not re-planned forever
  error   the document failed in `error_stage`; the sink records it and keeps its old chunks
`doc_rows` is how many rows the document sends in total: the sink commits a document only when all
of them have arrived, since re-batching can split one document's rows across batches.
"""

from __future__ import annotations

import re
import traceback

import pyarrow as pa

WORK_FIELDS = [
    pa.field("doc_id", pa.string()),
    pa.field("collection", pa.string()),
    pa.field("source_path", pa.string()),
    pa.field("abs_path", pa.string()),
    pa.field("source_type", pa.string()),
    pa.field("content_sha256", pa.string()),
    pa.field("size_bytes", pa.int64()),
    pa.field("pipeline_fingerprint", pa.string()),
    pa.field("run_id", pa.string()),
]
ERROR_FIELDS = [
    pa.field("error_stage", pa.string()),
    pa.field("error_class", pa.string()),
    pa.field("error_message", pa.string()),
]

WORK_SCHEMA = pa.schema(WORK_FIELDS)

# A parsed Markdown document's structure as typed columns. Stages read them as Python lists of dicts
# (Arrow's to_pylist gives a struct as a dict in field order) and write the same: no JSON to encode and
# parse again at every stage, and on Ray a row of the wrong shape fails in the stage that wrote it, where
# its batch meets the schema. The struct fields follow jobs.markdown.parse.Block and Section in order,
# so `asdict` is already the column's value.
BLOCK_TYPE = pa.struct([
    pa.field("kind", pa.string()),  # p | list | code | table | quote | html
    pa.field("start", pa.int64()),  # offsets into the document's text
    pa.field("end", pa.int64()),
])
SECTION_TYPE = pa.struct([
    pa.field("heading_path", pa.list_(pa.string())),
    pa.field("level", pa.int32()),
    pa.field("blocks", pa.list_(BLOCK_TYPE)),
    pa.field("heading_start", pa.int64()),  # None for the text before the first heading
    pa.field("heading_end", pa.int64()),
])
# A sentence unit (jobs.markdown.sentences): a sentence, a list item or a whole code, table or html
# block; `block` numbers the source block it came from, in document order.
UNIT_TYPE = pa.struct([
    pa.field("start", pa.int64()),
    pa.field("end", pa.int64()),
    pa.field("kind", pa.string()),
    pa.field("block", pa.int32()),
])

# A parsed Markdown document: `sections` from the parse stage, `units` (one list per section) from the
# sentence stage; both None on an error row. The front matter stays JSON text: it is free-form YAML or
# TOML (any keys, any nesting, a key's type differing from one document to the next), which no one Arrow
# type holds, and it leaves the pipeline as JSON text anyway (each chunk's `metadata`, jobs/chunks/metadata.py).
DOC_SCHEMA = pa.schema(
    WORK_FIELDS
    + [
        pa.field("title", pa.string()),
        pa.field("metadata_json", pa.string()),
        pa.field("text", pa.large_string()),
        pa.field("sections", pa.list_(SECTION_TYPE)),
        pa.field("units", pa.list_(pa.list_(UNIT_TYPE))),
    ]
    + ERROR_FIELDS
)

# The contract columns, in Parquet and database order.
CONTRACT_FIELDS = [
    pa.field("chunk_id", pa.string()),
    pa.field("collection", pa.string()),
    pa.field("doc_id", pa.string()),
    pa.field("source_path", pa.string()),
    pa.field("source_type", pa.string()),
    pa.field("heading_path", pa.list_(pa.string())),
    pa.field("breadcrumb", pa.string()),
    pa.field("text", pa.large_string()),
    pa.field("embed_text", pa.large_string()),
    pa.field("seq", pa.int32()),
    pa.field("char_start", pa.int64()),
    pa.field("char_end", pa.int64()),
    pa.field("sheet", pa.string()),
    pa.field("row", pa.int64()),
    pa.field("tags", pa.list_(pa.string())),
    pa.field("token_count", pa.int32()),
    pa.field("word_count", pa.int32()),
    pa.field("quality", pa.string()),
    pa.field("omitted", pa.bool_()),
    pa.field("omit_reason", pa.string()),
    pa.field("text_sha256", pa.string()),
    pa.field("pipeline_fingerprint", pa.string()),
    pa.field("run_id", pa.string()),
    pa.field("embedding", pa.list_(pa.float32())),
    pa.field("embedding_model", pa.string()),
    pa.field("metadata", pa.string()),  # the document's metadata as JSON text (jobs/chunks/metadata.py)
    # The chunk's terms for BM25, analysed on the workers (jobs/terms.py): sorted distinct term ids, each
    # one's frequency, and the number of terms.
    pa.field("lex_terms", pa.list_(pa.int32())),
    pa.field("lex_tfs", pa.list_(pa.int32())),
    pa.field("lex_length", pa.int32()),
]
CONTRACT_NAMES = [f.name for f in CONTRACT_FIELDS]

CHUNK_SCHEMA = pa.schema(
    CONTRACT_FIELDS
    + [
        pa.field("row_kind", pa.string()),
        pa.field("doc_rows", pa.int32()),
        pa.field("content_sha256", pa.string()),
        pa.field("doc_stats", pa.string()),  # JSON counts (normalization, merges) on a document's first row
    ]
    + ERROR_FIELDS
)


_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def storable(value, counts=None) -> object:
    """`value` (a string, or a list of them) as PostgreSQL and Arrow can store it: NUL removed (text
    cannot hold it) and lone surrogates replaced by U+FFFD (they are not UTF-8: a workbook's `_xD800_`
    escape or a `"\\ud800"` in YAML front matter decodes to one). Each change is counted in `counts`
    (`nul_removed`, `surrogates_replaced`: a document's normalization counts) when given.

    Normalization cleans prose only: code blocks, table rows and workbook cells keep such characters
    until here, the row boundary, before a chunk is hashed, counted and embedded; the store applies
    the same to every value it writes, for paths that never passed a chunk builder."""
    if isinstance(value, str):
        if not _UNSTORABLE.search(value):
            return value
        if counts is not None:
            nul = value.count("\x00")
            counts["nul_removed"] += nul
            counts["surrogates_replaced"] += len(_UNSTORABLE.findall(value)) - nul
        return _UNSTORABLE.sub(lambda m: "" if m.group() == "\x00" else "\ufffd", value)
    if isinstance(value, list):
        return [storable(v, counts) for v in value]
    return value


def doc_marker(work: dict, kind: str, **extra) -> dict:
    """A chunk-schema row that stands for a whole document (`empty` or `error`)."""
    return {
        "collection": work["collection"],
        "doc_id": work["doc_id"],
        "source_path": work["source_path"],
        "source_type": work["source_type"],
        "pipeline_fingerprint": work["pipeline_fingerprint"],
        "run_id": work["run_id"],
        "content_sha256": work["content_sha256"],
        "row_kind": kind,
        "doc_rows": 1,
        **extra,
    }


def error_fields(stage: str, exc: BaseException) -> dict:
    """What the errors table records: the stage, the exception class and a message a user can act on."""
    message = str(exc) or repr(exc)
    # The last frame tells a maintainer where it broke without flooding the errors table.
    tb = traceback.extract_tb(exc.__traceback__)
    if tb:
        frame = tb[-1]
        message += f" (at {frame.filename.rsplit('/', 1)[-1]}:{frame.lineno})"
    return {"error_stage": stage, "error_class": type(exc).__name__, "error_message": message[:2000]}


def error_row(work: dict, stage: str, exc: BaseException) -> dict:
    return doc_marker(work, "error", **error_fields(stage, exc))


def is_error(row: dict) -> bool:
    return bool(row.get("error_stage"))
