"""What the writers committed, counted per write task and summed by the driver: fixed-size tallies
(documents, chunks, quality bands, token counts by value), never lists of chunks."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc


@dataclass
class SinkStats:
    """What writers committed, counted per task and summed by `complete` (fixed size: tallies,
    not lists of chunks; failures are one entry per failed document)."""
    docs_done: int = 0
    docs_empty: int = 0
    docs_failed: int = 0
    chunks: int = 0
    vectors: int = 0
    omitted: int = 0
    quality: Counter = field(default_factory=Counter)
    omit_reasons: Counter = field(default_factory=Counter)
    by_source_type: Counter = field(default_factory=Counter)
    text_changes: Counter = field(default_factory=Counter)  # normalization, dedupe, merges (doc_stats)
    reused: int = 0  # chunks whose vector was not computed: a text the collection or the batch held (doc_stats)
    # Tokens and words of embedded chunks, tallied (value -> chunks): as big as the distinct values, not the run.
    tokens: Counter = field(default_factory=Counter)
    words: Counter = field(default_factory=Counter)
    failures: list[dict] = field(default_factory=list)
    duplicate_rows: int = 0  # rows that arrived twice (a retried block): each seq commits once
    shared: int = 0  # chunks whose text another document holds: recorded, not stored again
    released: int = 0  # other documents marked pending: a text only a replaced document held is gone
    staged: int = 0  # documents a task received only in part, assembled at the end
    transactions: int = 0
    parts: int = 0  # Parquet parts written
    seconds: float = 0.0  # writers' time writing Parquet and committing, summed over tasks
    nodes: set = field(default_factory=set)  # Ray nodes the writers ran on (ids, shortened)
    # What stopped a task (not one document's fault): a full disk, a server gone past the reconnect
    # budget, a bug. `complete` raises it, so the run stops instead of calling its documents lost.
    fatal: list[dict] = field(default_factory=list)

    def add(self, other: SinkStats) -> None:
        for name, value in vars(other).items():
            if name in ("failures", "fatal"):
                getattr(self, name).extend(value)
            elif name == "nodes":
                self.nodes |= value
            else:
                setattr(self, name, getattr(self, name) + value)

    def count(self, table: pa.Table) -> None:
        """Tally a committed batch's chunk rows (all of them: embedded and omitted), column by column."""
        chunks = rows_where(table.select(["row_kind", "omitted", "omit_reason", "quality", "source_type", "token_count",
                                     "word_count"]), pc.equal(table.column("row_kind"), "chunk"))
        omitted = pc.fill_null(chunks.column("omitted"), False)
        self.chunks += chunks.num_rows
        self.omitted += pc.sum(omitted).as_py() or 0
        for name, counter in (("quality", self.quality), ("source_type", self.by_source_type)):
            counter.update(_tally(chunks.column(name)))
        dropped = chunks.filter(omitted).column("omit_reason").to_pylist()
        self.omit_reasons.update((r or "").split(":")[0] for r in dropped)
        kept = rows_where(chunks, pc.invert(omitted))
        self.tokens.update(_tally(kept.column("token_count")))
        self.words.update(_tally(kept.column("word_count")))
        self.count_doc_stats(table)

    def count_doc_stats(self, table: pa.Table) -> None:
        """Sum the documents' `doc_stats`: text changes, and the vectors the embedder reused."""
        if "doc_stats" in table.column_names:
            for raw in table.column("doc_stats").drop_null().to_pylist():
                if raw:
                    changes = json.loads(raw)
                    self.reused += changes.pop("vectors_reused", 0)
                    self.text_changes.update(changes)


def _tally(column: pa.ChunkedArray) -> dict:
    """{value: rows} of a column, nulls left out (pyarrow's value_counts, not a Python loop per row)."""
    counts = pc.value_counts(column.drop_null())
    return dict(zip(counts.field("values").to_pylist(), counts.field("counts").to_pylist()))


def rows_where(table: pa.Table, mask) -> pa.Table:
    """The rows of `table` where `mask` holds (null: not), without a copy when all do: the common batch
    is all embedded chunks, and filtering copies every column, vectors included."""
    mask = pc.fill_null(mask, False)
    return table if pc.all(mask).as_py() else table.filter(mask)
