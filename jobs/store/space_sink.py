"""The re-embed's write path: ChunkDatasink's parallel write tasks, committing into a new embedding space.

Rows in: the active space's stored chunks with their new vectors (read by jobs/store/spaces.py
`space_rows`, which numbers each document's rows in `pos` and counts them in `doc_rows`), and error rows
for documents the encoder failed. The guarantee is DocumentWriter's (jobs/store/writers.py), with the
space's own checkpoint: a document is in the space when its rows are, and every commit replaces its
documents' rows whole in one transaction (`load_space_documents`), so a killed re-embed leaves each
document in the space wholly or not at all. No Parquet and no documents-table rows: those belong to the
active space, which stays untouched until the switch. A document that fails (a vector the database
refuses, an encoder error) is counted and left out; the space then lacks it, so the re-embed does not
switch and the next one retries it.
"""

from __future__ import annotations

import logging

import psycopg
import pyarrow as pa
import pyarrow.compute as pc
from psycopg import sql

from jobs.store.datasink import ChunkDatasink
from jobs.store.sink_stats import SinkStats
from jobs.store.spaces import Collection
from jobs.store.staging import WriterStore
from jobs.store.write_progress import Progress

log = logging.getLogger(__name__)


def space_run_id(space: Collection) -> str:
    """The re-embed's name for its staged rows: one per space, so a resumed re-embed clears its own."""
    return f"reembed {space.chunk_table}"


class SpaceDatasink(ChunkDatasink):
    """ChunkDatasink into the embedding space `space` (module docstring: what differs)."""

    position = "pos"

    def __init__(self, url: str, schema: str, space: Collection, *, label: str, batch_rows: int = 2000,
                 batch_seconds: float = 5.0, reconnect_seconds: float = 60.0):
        super().__init__(url, schema, space, space_run_id(space), label=label, share_text=False,
                         batch_rows=batch_rows, batch_seconds=batch_seconds, reconnect_seconds=reconnect_seconds)

    def _commit_batch(self, store: WriterStore, heads: list[dict], table: pa.Table, stats: SinkStats) -> None:
        chunks = table.filter(pc.equal(table.column("row_kind"), "chunk"))
        written = store.load_space_documents(self.coll, [h["doc_id"] for h in heads], chunks)
        stats.transactions += 1
        stats.docs_done += len(heads)
        stats.chunks += chunks.num_rows
        stats.vectors += written
        stats.count_doc_stats(table)  # texts repeated within an embedding batch, encoded once

    def _fail(self, store: WriterStore, head: dict, stage: str, cls: str, message: str, stats: SinkStats) -> None:
        log.warning("%s: not re-embedded (%s at %s: %s); the space lacks it until a rerun", head["source_path"],
                    cls, stage, message)
        stats.docs_failed += 1
        stats.failures.append({"source_path": head["source_path"], "stage": stage, "error_class": cls,
                               "message": message})

    def _committed(self, store: WriterStore, head: dict) -> bool:
        return store.space_holds(self.coll, head["doc_id"])


class SpaceProgress(Progress):
    """Progress of a re-embed: documents and vectors in the new space beyond those it held at the start."""

    def __init__(self, url: str, schema: str, space: Collection, total: int, already: tuple[int, int],
                 every: float = 5.0):
        super().__init__(url, schema, space.name, space_run_id(space), total, every)
        self.space, self.already = space, already

    def read(self, conn: psycopg.Connection) -> tuple[tuple[int, int, int], None]:
        """The space's documents and rows beyond those it held at the start; no work: a re-embed's time left
        is counted in documents (it has no listing sizes)."""
        docs, rows = conn.execute(sql.SQL("SELECT count(DISTINCT doc_id), count(*) FROM {}").format(
            sql.Identifier(self.schema, self.space.chunk_table))).fetchone()
        return (docs - self.already[0], 0, rows - self.already[1]), None
