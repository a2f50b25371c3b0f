"""The parallel write path: a Ray Data Datasink whose write tasks commit documents from the workers.

Rows in: chunk-schema rows (jobs/rows.py) with `row_kind` and `doc_rows`, and the document-level
columns the checkpoint row needs (`content_sha256`, `pipeline_fingerprint`; `source_size` and
`source_etag` where a listing gave them). No row passes through the driver.

Guarantee, step by step as Ray's own sinks state theirs:
- `on_write_start` (driver, once): nothing to create; the store's migrations made the staging table.
- `write` (each task, on a worker, with its own connection, named `<label> writer <task>` in
  `pg_stat_activity`): the task's rows are grouped by document. A document whose `doc_rows` rows
  have all arrived is committed atomically with its checkpoint row (PgStore.commit_documents), many
  documents per transaction (`batch_rows`), so a crash leaves each document fully old or fully new
  and the documents table says which. A document the task received only in part (Ray Data split its
  rows across tasks) is staged in the database (`staged_rows`), not committed. A document with an
  error row is recorded failed and keeps its old chunks; one the database rejects is recorded failed
  at stage `load` without taking the other documents of its transaction with it.
- `on_write_complete` (driver): the staged parts are assembled per document and committed the same
  way; a document still missing rows is recorded failed (`IncompleteDocument`) and keeps its old
  chunks. Index builds and gates are the caller's, after this.
- `on_write_failed`: staged rows stay; the documents they belong to are not done, so a rerun
  processes them again and replaces whatever a task committed before the failure.
A task Ray retries commits its whole documents again: each replaces rather than duplicates (chunk_id
is the primary key, and a document's old rows go in the transaction that adds its new ones). Text
one document shares with another is stored once (`database.shared_text`): writers committing the
same text take a lock on it, so exactly one becomes its holder (jobs/store/shared_text.py).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Iterable

import psycopg
import pyarrow as pa
import pyarrow.compute as pc
from psycopg import sql
from ray.data import Datasink
from ray.data.datasource.datasink import WriteResult

from jobs.store.pgvector import Collection, PgStore
from jobs.store.sink import DOCUMENT_FAULTS

log = logging.getLogger(__name__)

DOC_COLUMNS = ("doc_id", "source_path", "source_type", "content_sha256", "pipeline_fingerprint",
               "source_size", "source_etag")


@dataclass
class WriteStats:
    """What writers committed; summed over tasks by `on_write_complete`."""
    documents: int = 0
    empty: int = 0
    failed: int = 0
    vectors: int = 0
    omitted: int = 0
    shared: int = 0
    released: int = 0
    staged: int = 0  # documents a task received only in part, assembled at the end
    duplicate_rows: int = 0  # rows that arrived twice (a retried block): each seq commits once
    transactions: int = 0
    failures: list[dict] = field(default_factory=list)

    def add(self, other: "WriteStats") -> None:
        for name, value in vars(other).items():
            if name == "failures":
                self.failures.extend(value)
            else:
                setattr(self, name, getattr(self, name) + value)


def _seqs(table: pa.Table) -> list[int]:
    return [s or 0 for s in table.column("seq").to_pylist()]  # an error or empty marker is its document's row 0


def _dedupe(table: pa.Table) -> tuple[pa.Table, int]:
    """Each seq once (the first row that arrived), in seq order; and how many rows were repeats."""
    seqs = _seqs(table)
    first: dict[int, int] = {}
    for i, s in enumerate(seqs):
        first.setdefault(s, i)
    if len(first) == len(seqs) and seqs == sorted(seqs):
        return table, 0
    return table.take([first[s] for s in sorted(first)]), len(seqs) - len(first)


def _whole(table: pa.Table) -> bool:
    """Whether a document's deduplicated rows are all of its rows, seq 0 … doc_rows-1."""
    need = table.column("doc_rows")[0].as_py() or 1
    return _seqs(table) == list(range(need))


class _Documents:
    """A task's rows gathered by document: whole ones come out in batches, partial ones stay."""

    def __init__(self):
        self.pieces: dict[str, list[pa.Table]] = defaultdict(list)
        self.repeats = 0

    def add(self, block: pa.Table) -> list[pa.Table]:
        """The documents `block` completes, each as one table (those whole in `block` first, together)."""
        docs, want, seqs = block.column("doc_id").to_pylist(), block.column("doc_rows").to_pylist(), _seqs(block)
        rows_of: dict[str, list[int]] = defaultdict(list)
        for i, d in enumerate(docs):
            rows_of[d].append(i)
        whole_here: list[int] = []
        done: list[pa.Table] = []
        for d, idx in rows_of.items():
            if d not in self.pieces and [seqs[i] for i in idx] == list(range(want[idx[0]] or 1)):
                whole_here.extend(idx)  # the common case: the whole document in one block, in order
                continue
            self.pieces[d].append(block.take(idx))
            table, repeats = _dedupe(pa.concat_tables(self.pieces[d]))
            if _whole(table):
                done.append(table)
                self.repeats += repeats
                del self.pieces[d]
        if whole_here:
            done.insert(0, block.take(whole_here) if len(whole_here) < block.num_rows else block)
        return done

    def partial(self) -> dict[str, pa.Table]:
        return {d: pa.concat_tables(ps) for d, ps in self.pieces.items()}


def _head(table: pa.Table, i: int) -> dict:
    return {c: table.column(c)[i].as_py() if c in table.column_names else None for c in DOC_COLUMNS}


def _split_documents(table: pa.Table) -> list[tuple[dict, pa.Table]]:
    """(checkpoint fields, rows) per document of a table whose documents are whole and contiguous."""
    docs = table.column("doc_id").to_pylist()
    out, start = [], 0
    for i in range(1, len(docs) + 1):
        if i == len(docs) or docs[i] != docs[start]:
            out.append((_head(table, start), table.slice(start, i - start)))
            start = i
    return out


class ChunkDatasink(Datasink):
    """Commit documents from Ray Data write tasks (module docstring: the guarantee). `label` names the
    job in `pg_stat_activity` (`corpusmill load <run>`); `batch_rows`: rows per transaction."""

    def __init__(self, url: str, schema: str, coll: Collection, run_id: str, *, label: str,
                 share_text: bool = True, batch_rows: int = 2000, reconnect_seconds: float = 60.0):
        self.url, self.schema, self.coll, self.run_id, self.label = url, schema, coll, run_id, label
        self.share_text, self.batch_rows, self.reconnect_seconds = share_text, batch_rows, reconnect_seconds
        self.stats = WriteStats()

    def get_name(self) -> str:
        return "CorpusmillWrite"

    # ---- on the workers ---------------------------------------------------------------------------
    def write(self, blocks: Iterable[pa.Table], ctx) -> WriteStats:
        stats = WriteStats()
        name = f"{self.label} writer {getattr(ctx, 'task_idx', 0)}"
        with PgStore(self.url, self.schema, application_name=name, reconnect_seconds=self.reconnect_seconds) as store:
            gathered, ready, ready_rows = _Documents(), [], 0
            for block in blocks:
                block = pa.table(block) if not isinstance(block, pa.Table) else block
                for doc in gathered.add(block):
                    ready.append(doc)
                    ready_rows += doc.num_rows
                if ready_rows >= self.batch_rows:
                    self._commit(store, pa.concat_tables(ready), stats)
                    ready, ready_rows = [], 0
            if ready:
                self._commit(store, pa.concat_tables(ready), stats)
            partial = gathered.partial()
            if partial:
                self._stage(store, partial)
                stats.staged += len(partial)
            stats.duplicate_rows += gathered.repeats
        return stats

    def _stage(self, store: PgStore, partial: dict[str, pa.Table]) -> None:
        with store.conn.transaction(), store.conn.cursor() as cur:
            cur.executemany(sql.SQL("INSERT INTO {} (run_id, collection, doc_id, rows) VALUES (%s, %s, %s, %s)").format(
                sql.Identifier(self.schema, "staged_rows")),
                [(self.run_id, self.coll.name, d, _ipc(t)) for d, t in partial.items()])

    def _commit(self, store: PgStore, table: pa.Table, stats: WriteStats) -> None:
        """Whole documents (contiguous rows): error documents recorded, the rest in one transaction; if the
        database rejects it, document by document, so only the one at fault is recorded failed."""
        kinds = table.column("row_kind")
        if pc.any(pc.equal(kinds, "error")).as_py():
            good = []
            for head, rows in _split_documents(table):
                errors = rows.filter(pc.equal(rows.column("row_kind"), "error"))
                if errors.num_rows:
                    e = errors.slice(0, 1).to_pylist()[0]
                    self._fail(store, head, e["error_stage"], e["error_class"], e["error_message"], stats)
                else:
                    good.append(rows)
            if not good:
                return
            table = pa.concat_tables(good)
        docs = _split_documents(table)
        try:
            self._commit_batch(store, [h for h, _ in docs], table, stats)
        except DOCUMENT_FAULTS:
            for head, rows in docs:
                try:
                    self._commit_batch(store, [head], rows, stats)
                except DOCUMENT_FAULTS as exc:
                    log.warning("%s: could not load (%s: %s)", head["source_path"], type(exc).__name__, exc)
                    self._fail(store, head, "load", type(exc).__name__, str(exc).strip() or repr(exc), stats)

    def _commit_batch(self, store: PgStore, heads: list[dict], table: pa.Table, stats: WriteStats) -> None:
        chunk = pc.equal(table.column("row_kind"), "chunk")
        omitted = pc.and_(chunk, pc.fill_null(table.column("omitted"), False))
        embedded = table.filter(pc.and_(chunk, pc.invert(omitted)))
        committed = store.commit_documents(self.coll, heads, embedded, self.run_id, self.share_text)
        with_chunks = set(table.filter(chunk).column("doc_id").to_pylist())
        stats.transactions += 1
        stats.documents += len(heads)
        stats.empty += sum(1 for h in heads if h["doc_id"] not in with_chunks)
        stats.vectors += committed.vectors
        stats.shared += committed.shared
        stats.released += committed.released
        stats.omitted += pc.sum(omitted).as_py() or 0

    def _fail(self, store: PgStore, head: dict, stage: str, cls: str, message: str, stats: WriteStats) -> None:
        store.record_failure(self.coll.name, head, self.run_id, stage, cls, message)
        stats.failed += 1
        stats.failures.append({"source_path": head["source_path"], "stage": stage, "error_class": cls,
                               "message": message})

    # ---- on the driver ----------------------------------------------------------------------------
    def on_write_complete(self, write_result: WriteResult) -> None:
        for s in write_result.write_returns:
            self.stats.add(s)
        with PgStore(self.url, self.schema, application_name=f"{self.label} assemble",
                     reconnect_seconds=self.reconnect_seconds) as store:
            self.assemble(store)

    def assemble(self, store: PgStore) -> None:
        """Commit the documents tasks staged in part, each whole; then drop the staged rows."""
        staged = sql.Identifier(self.schema, "staged_rows")
        key = (self.run_id, self.coll.name)
        docs = [r[0] for r in store.conn.execute(sql.SQL(
            "SELECT DISTINCT doc_id FROM {} WHERE run_id = %s AND collection = %s ORDER BY 1").format(staged), key)]
        for d in docs:
            pieces = [_from_ipc(r[0]) for r in store.conn.execute(sql.SQL(
                "SELECT rows FROM {} WHERE run_id = %s AND collection = %s AND doc_id = %s").format(staged), (*key, d))]
            table, repeats = _dedupe(pa.concat_tables(pieces))
            self.stats.duplicate_rows += repeats
            need = table.column("doc_rows")[0].as_py() or 1
            head = _head(table, 0)
            if _whole(table):
                self._commit(store, table, self.stats)
            elif not self._done_in_this_run(store, head):
                missing = sorted(set(range(need)) - set(_seqs(table)))
                self._fail(store, head, "sink", "IncompleteDocument",
                           f"received {table.num_rows} of {need} rows (missing seq {missing[:10]}"
                           f"{' …' if len(missing) > 10 else ''}); it will be retried", self.stats)
            else:  # a retried block repeated part of a document another task committed whole
                self.stats.duplicate_rows += table.num_rows
            store.conn.execute(sql.SQL("DELETE FROM {} WHERE run_id = %s AND collection = %s AND doc_id = %s").format(
                staged), (*key, d))
        if docs:
            log.info("%s: %d documents split across write tasks, assembled whole", self.label, len(docs))

    def _done_in_this_run(self, store: PgStore, head: dict) -> bool:
        row = store.conn.execute(sql.SQL(
            "SELECT status, run_id FROM {} WHERE collection = %s AND source_path = %s").format(
            sql.Identifier(self.schema, "documents")), (self.coll.name, head["source_path"])).fetchone()
        return bool(row) and row[0] == "done" and row[1] == self.run_id

    def on_write_failed(self, error: Exception) -> None:
        log.warning("%s: a write task failed (%s); documents it did not commit stay pending for the next run",
                    self.label, error)


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def _from_ipc(data: bytes) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


def local_only(url: str) -> bool:
    """Whether the database URL reaches the server only from this machine (a Unix socket, localhost):
    writers must then run on the driver's node."""
    host = psycopg.conninfo.conninfo_to_dict(url).get("host") or ""
    return not host or host.startswith("/") or host.split(",")[0] in ("localhost", "127.0.0.1", "::1")
