"""The write path: writers that commit whole documents with their checkpoint rows.

Rows in: chunk-schema rows (jobs/rows.py CHUNK_SCHEMA: `row_kind`, `doc_rows`, `content_sha256`,
`doc_stats`, the error columns). `DocumentWriter` has the shape of a Ray Data Datasink without being
one, so that a small run in process (jobs/in_process.py) commits through it without importing Ray;
jobs/store/datasink.py makes it one, and on Ray no row passes through the driver: ingest and `load`
both end in `Dataset.write_datasink(ChunkDatasink(…), concurrency=writers)`.

Guarantee, step by step as Ray's own sinks state theirs:
- `write` (each task, on a worker, with its own connection, named `<label> writer <task>` in
  `pg_stat_activity`): the task's rows are grouped by document. Documents whose `doc_rows` rows
  have all arrived go out in batches of about `batch_rows` rows: first their chunk rows into a
  Parquet part of the run (`parts`; named by attempt and task, written whole or not at all), then
  one transaction that replaces each document's chunks and marks it done (PgStore.commit_documents).
  So Parquet holds every committed document, a crash leaves each document fully old or fully new,
  and the documents table says which. A document with an error row is recorded failed and keeps
  its old chunks; one the database rejects is recorded failed at stage `load` without taking the
  other documents of its transaction with it. A document the task received only in part (Ray Data
  split its rows across tasks) is staged in the database (`staged_rows`), not committed.
- `complete` (driver; a Datasink's `on_write_complete`): the staged parts are assembled per document and committed the same
  way; a document still missing rows is recorded failed (`IncompleteDocument`) and keeps its old
  chunks. The writers' counts are summed into `stats`. Index builds, gates and the documents the
  pipeline never returned (still `pending`) are the caller's, after this.
- `on_write_failed`: staged rows stay (the collection's next run clears them when it takes the lock,
  PgStore.lock_collection); the documents they belong to are not done, so a rerun
  processes them again and replaces whatever a task committed before the failure.
A task Ray retries commits its whole documents again: each replaces rather than duplicates (chunk_id
is the primary key, and a document's old rows go in the transaction that adds its new ones). Text
one document shares with another is stored once (`database.shared_text`): writers committing the
same text take a lock on it, so exactly one becomes its holder (jobs/store/shared_text.py). A
connection lost to a server restart is the store's to heal (PgStore reconnects and replays the
transaction); a server that stays away fails the task, and Ray's retries, then the run.
"""

from __future__ import annotations

import logging
import sys
import time
from collections import defaultdict
from collections.abc import Iterable

import numpy as np
import psycopg
import pyarrow as pa
import pyarrow.compute as pc
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_incrementing

from jobs.errors import DataFault, InternalError, UserError, bug_report
from jobs.store import faults
from jobs.store.locks import OwnershipLost
from jobs.store.parquet import PartWriter
from jobs.store.pgvector import Collection, PgStore
from jobs.store.sink_stats import SinkStats, rows_where
from jobs.store.staging import WriterStore

log = logging.getLogger(__name__)

DEADLOCK_RETRIES = 3
ASSEMBLED_TASK = 9999  # the task number in the names of parts the driver writes for documents it assembled
DOC_COLUMNS = ("doc_id", "source_path", "source_type", "content_sha256", "pipeline_fingerprint",
               "source_size", "source_etag")


# What one document's rows can provoke: a value PostgreSQL rejects (NaN in a vector, an out-of-range
# number), a constraint, a row over a size limit, or our own check of a chunk (arrow_copy.UnloadableChunk).
# Not a plain ValueError: pyarrow's ArrowInvalid is one, and from the COPY path it is a bug (exit 4).
DOCUMENT_FAULTS = (psycopg.DataError, psycopg.IntegrityError, psycopg.errors.ProgramLimitExceeded, DataFault)

# Failures (by error class) that say nothing about the document's content: a worker or a block lost, a
# read the network or the store cut short, the file changed while it was read, memory. The next run
# retries them. Any other failure is the content's own and settles: the document stays failed until its
# content or the pipeline changes, or `ingest --retry-failed` (PgStore.record_failure).
TRANSIENT_FAULTS = frozenset({
    "LostDocument", "IncompleteDocument", "SourceChanged", "MemoryError", "OSError", "IOError", "TimeoutError",
    "ConnectionError", "ConnectionResetError", "ConnectionAbortedError", "ConnectionRefusedError",
    "BrokenPipeError", "FileNotFoundError", "PermissionError", "InterruptedError",
    "ClientError", "EndpointConnectionError", "ReadTimeoutError", "ConnectTimeoutError", "ResponseStreamingError",
    "ServiceRequestError", "ServiceResponseError", "TransportError",  # botocore, azure-core, google-auth
})


class WriterFailed(UserError, RuntimeError):
    """A write task stopped for a reason of its own, not one document's: the run stops (one line; the
    task's traceback is in the log). `database`: the server or the connection to it was the reason;
    `resumable`: the same command can get past it (jobs/store/faults.py)."""

    def __init__(self, message: str, database: bool = False, resumable: bool = True):
        super().__init__(message)
        self.database, self.resumable = database, resumable


def _one_line(text: str) -> str:
    return "; ".join(line.strip() for line in text.splitlines() if line.strip())


def _seqs(table: pa.Table, position: str = "seq") -> list[int]:
    """Each row's place in its document (`position`: a chunk's seq for an ingest's rows; a re-embed
    numbers stored rows itself, jobs/store/spaces.py)."""
    return [s or 0 for s in table.column(position).to_pylist()]  # an error or empty marker is its document's row 0


def _dedupe(table: pa.Table, position: str = "seq") -> tuple[pa.Table, int]:
    """Each place once (the first row that arrived), in order; and how many rows were repeats."""
    seqs = _seqs(table, position)
    first: dict[int, int] = {}
    for i, s in enumerate(seqs):
        first.setdefault(s, i)
    if len(first) == len(seqs) and seqs == sorted(seqs):
        return table, 0
    return table.take([first[s] for s in sorted(first)]), len(seqs) - len(first)


def _whole(table: pa.Table, position: str = "seq") -> bool:
    """Whether a document's deduplicated rows are all of its rows, places 0 … doc_rows-1."""
    need = table.column("doc_rows")[0].as_py() or 1
    return _seqs(table, position) == list(range(need))


class _Documents:
    """A task's rows gathered by document: whole ones come out in batches, partial ones stay."""

    def __init__(self, position: str = "seq"):
        self.pieces: dict[str, list[pa.Table]] = defaultdict(list)
        self.repeats, self.position = 0, position

    def add(self, block: pa.Table) -> list[pa.Table]:
        """The documents `block` completes, each as one table (those whole in `block` first, together)."""
        docs, want = block.column("doc_id").to_pylist(), block.column("doc_rows").to_pylist()
        seqs = _seqs(block, self.position)
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
            table, repeats = _dedupe(pa.concat_tables(self.pieces[d]), self.position)
            if _whole(table, self.position):
                done.append(table)
                self.repeats += repeats
                del self.pieces[d]
        if whole_here:
            # The block itself only when its rows are already grouped by document, in order.
            done.insert(0, block if whole_here == list(range(block.num_rows)) else block.take(whole_here))
        return done

    def partial(self) -> dict[str, pa.Table]:
        return {d: pa.concat_tables(ps) for d, ps in self.pieces.items()}


def _head(table: pa.Table, i: int) -> dict:
    return {c: table.column(c)[i].as_py() if c in table.column_names else None for c in DOC_COLUMNS}


def _document_bounds(table: pa.Table) -> list[tuple[int, int]]:
    """(first row, row count) of each document of a table whose documents are whole and contiguous."""
    docs = table.column("doc_id").combine_chunks()
    n = len(docs)
    if not n:
        return []
    changed = pc.fill_null(pc.not_equal(docs.slice(1), docs.slice(0, n - 1)), True)
    starts = [0] + (np.flatnonzero(changed.to_numpy(zero_copy_only=False)) + 1).tolist()
    return [(a, b - a) for a, b in zip(starts, starts[1:] + [n])]


def _split_documents(table: pa.Table) -> list[tuple[dict, pa.Table]]:
    """(checkpoint fields, rows) per document of a table whose documents are whole and contiguous. The
    checkpoint columns are read once each: indexing a many-chunked column row by row costs a search per row."""
    bounds = _document_bounds(table)
    values = {c: table.column(c).to_pylist() if c in table.column_names else None for c in DOC_COLUMNS}
    return [({c: v[start] if v is not None else None for c, v in values.items()}, table.slice(start, n))
            for start, n in bounds]


class DocumentWriter:
    """Commit documents from write tasks (module docstring: the guarantee). `label` names the
    job in `pg_stat_activity` (`corpusmill ingest <run>`); a transaction commits once `batch_rows` rows
    or `batch_documents` whole documents wait (None: no limit), or the oldest has waited `batch_seconds`,
    or the task's input ends, and holds at most `batch_documents` documents; `parts`:
    where the tasks write the run's Parquet (None: no Parquet, as a reload writes none);
    `keep_listing`: documents keep the listing their pending row holds (an ingest's plan)."""

    position = "seq"  # the column that numbers a document's rows 0 … doc_rows-1

    def __init__(self, url: str, schema: str, coll: Collection, run_id: str, *, label: str,
                 share_text: bool = True, batch_rows: int = 2000, batch_seconds: float = 5.0,
                 reconnect_seconds: float = 60.0, parts: PartWriter | None = None, keep_listing: bool = False,
                 batch_documents: int | None = None,
                 owner: str | None = None):
        self.url, self.schema, self.coll, self.run_id, self.label = url, schema, coll, run_id, label
        self.share_text, self.batch_rows, self.reconnect_seconds = share_text, batch_rows, reconnect_seconds
        self.batch_seconds, self.batch_documents = batch_seconds, batch_documents
        self.parts, self.keep_listing = parts, keep_listing
        self.owner = owner  # the run's owner token: every commit checks it (jobs/store/locks.py, the fence)
        self.stats = SinkStats()

    # ---- on the workers ---------------------------------------------------------------------------
    def write(self, blocks: Iterable[pa.Table], ctx) -> SinkStats:
        stats, task = SinkStats(), getattr(ctx, "task_idx", 0)
        ray = sys.modules.get("ray")  # imported only where the run is on Ray (a small run in process is not)
        stats.nodes.add(ray.get_runtime_context().get_node_id()[:12] if ray and ray.is_initialized() else "driver")
        try:
            self._write(blocks, task, stats)
        except OwnershipLost as exc:  # fenced: another run owns the collection, nothing of this one is wrong
            # Not a warning: the driver says it once, as its last line, and a worker's warning reaches the
            # driver's terminal after it (Ray forwards worker output as it comes).
            log.info("%s writer %d stopped: %s", self.label, task, exc)
            stats.fatal.append({"error_class": type(exc).__name__, "message": str(exc), "database": False,
                                "fenced": True})
        except Exception as exc:  # returned, not raised: Ray Data would drop the block and its counts
            log.exception("%s writer %d stopped", self.label, task)
            stats.fatal.append({"error_class": type(exc).__name__, "message": str(exc).strip() or repr(exc),
                                "database": isinstance(exc, (psycopg.Error, ConnectionError)),
                                "bug": bug_report(exc), "advice": faults.advice(exc),
                                "resumable": faults.resumable(exc)})
        return stats

    def _write(self, blocks: Iterable[pa.Table], task: int, stats: SinkStats) -> None:
        with WriterStore(self.url, self.schema, application_name=f"{self.label} writer {task}",
                         reconnect_seconds=self.reconnect_seconds) as store:
            gathered, ready, ready_rows, ready_docs, oldest = _Documents(self.position), [], 0, 0, None
            for block in blocks:
                block = pa.table(block) if not isinstance(block, pa.Table) else block
                for doc in gathered.add(block):
                    ready.append(doc)
                    ready_rows += doc.num_rows
                    ready_docs += pc.count_distinct(doc.column("doc_id")).as_py()
                    oldest = oldest or time.monotonic()
                full = ready_rows >= self.batch_rows or ready_docs >= (self.batch_documents or float("inf"))
                if ready and (full or time.monotonic() - oldest >= self.batch_seconds):
                    self._commit_ready(store, ready, stats, task)
                    ready, ready_rows, ready_docs, oldest = [], 0, 0, None
            if ready:
                self._commit_ready(store, ready, stats, task)
            partial = gathered.partial()
            if partial:
                store.stage(self.run_id, self.coll.name, partial)
                stats.staged += len(partial)
            stats.duplicate_rows += gathered.repeats

    def _commit_ready(self, store: PgStore, ready: list[pa.Table], stats: SinkStats, task: int) -> None:
        """The waiting documents, in transactions of at most `batch_rows` rows (a document larger than
        that alone) and `batch_documents` documents: a block arrives whole, and a Parquet part of 60k
        rows in one transaction would hold its work, and the progress, in one jump."""
        # One chunk per column: blocks and documents arrive as many small slices, and each compute call
        # and COPY conversion below pays per chunk.
        table = pa.concat_tables(ready).combine_chunks()
        limit_docs = self.batch_documents or float("inf")
        bounds = _document_bounds(table)
        if table.num_rows <= self.batch_rows and len(bounds) <= limit_docs:
            self._commit(store, table, stats, task)
            return
        start, rows, docs = 0, 0, 0
        for first, n in bounds:
            if docs and (rows + n > self.batch_rows or docs >= limit_docs):
                self._commit(store, table.slice(start, rows), stats, task)
                start, rows, docs = first, 0, 0
            rows += n
            docs += 1
        if docs:
            self._commit(store, table.slice(start, rows), stats, task)

    def _commit(self, store: PgStore, table: pa.Table, stats: SinkStats, task: int) -> None:
        """Whole documents (contiguous rows): error documents recorded; the rest into a Parquet part, then
        in one transaction; if the database rejects it, document by document, so only the one at fault
        is recorded failed."""
        t0 = time.monotonic()
        if pc.any(pc.equal(table.column("row_kind"), "error")).as_py():
            good = []
            for head, rows in _split_documents(table):
                errors = rows.filter(pc.equal(rows.column("row_kind"), "error"))
                if errors.num_rows:
                    e = errors.slice(0, 1).to_pylist()[0]
                    if e["error_class"] == InternalError.__name__:  # a stage's bug, carried here (jobs/adapter.py)
                        raise InternalError(e["error_message"])
                    self._fail(store, head, e["error_stage"], e["error_class"], e["error_message"], stats)
                else:
                    good.append(rows)
            table = pa.concat_tables(good) if good else None
        if table is not None:
            if self.parts is not None:
                stats.parts += self.parts.write(table.filter(pc.equal(table.column("row_kind"), "chunk")), task)
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
        stats.seconds += time.monotonic() - t0

    def _commit_batch(self, store: PgStore, heads: list[dict], table: pa.Table, stats: SinkStats) -> None:
        chunk = pc.equal(table.column("row_kind"), "chunk")
        omitted = pc.and_(chunk, pc.fill_null(table.column("omitted"), False))
        embedded = rows_where(table, pc.and_(chunk, pc.invert(omitted)))
        # Two writers releasing texts each other's documents copy can meet in opposite orders: the server
        # rolls one back, and its transaction is simply run again (0.1 s, 0.2 s, … apart).
        committed = Retrying(
            retry=retry_if_exception_type((psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure)),
            stop=stop_after_attempt(DEADLOCK_RETRIES + 1), wait=wait_incrementing(0.1, 0.1), reraise=True)(
            store.commit_documents, self.coll, heads, embedded, self.run_id, self.share_text,
            keep_listing=self.keep_listing, owner=self.owner)
        with_chunks = set(rows_where(table.select(["doc_id"]), chunk).column("doc_id").to_pylist())
        stats.transactions += 1
        stats.docs_done += len(heads)
        stats.docs_empty += sum(1 for h in heads if h["doc_id"] not in with_chunks)
        stats.vectors += committed.vectors
        stats.shared += committed.shared
        stats.released += committed.released
        stats.count(table)

    def _fail(self, store: PgStore, head: dict, stage: str, cls: str, message: str, stats: SinkStats) -> None:
        store.record_failure(self.coll.name, head, self.run_id, stage, cls, message,
                             retryable=cls in TRANSIENT_FAULTS, owner=self.owner)
        stats.docs_failed += 1
        stats.failures.append({"source_path": head["source_path"], "stage": stage, "error_class": cls,
                               "message": message})

    # ---- on the driver ----------------------------------------------------------------------------
    def on_write_start(self, schema=None) -> None:
        """Staged rows an earlier attempt of this run left (a killed driver, a failed write) are stale:
        the documents they belong to are pending and are written again now."""
        with WriterStore(self.url, self.schema, application_name=f"{self.label} start",
                         reconnect_seconds=self.reconnect_seconds) as store:
            store.unstage(self.run_id, self.coll.name)

    def complete(self, returns: Iterable[SinkStats]) -> None:
        """After every task's `write`: their counts summed, then the staged documents assembled."""
        for s in returns:
            self.stats.add(s)
        fenced = [f for f in self.stats.fatal if f.get("fenced")]
        if fenced:
            raise OwnershipLost(fenced[0]["message"])
        bugs = [f["bug"] for f in self.stats.fatal if f.get("bug")]
        if bugs:  # not the user's to fix (exit 4): committed documents are kept, the rest stay pending
            raise InternalError(f"{len(self.stats.fatal)} write task(s) stopped on a bug; the first: {bugs[0]}")
        if self.stats.fatal:
            first = self.stats.fatal[0]
            # Resumable only when every task's fault is: one a rerun cannot get past says what must change.
            stuck = next((f for f in self.stats.fatal if not f.get("resumable", True)), None)
            advice = stuck["advice"] if stuck else "run the same command again to resume"
            raise WriterFailed(f"{len(self.stats.fatal)} write task(s) stopped; the first: {first['error_class']}: "
                               f"{_one_line(first['message'])}. Committed documents are kept; the rest stay "
                               f"pending: {advice}", database=any(f["database"] for f in self.stats.fatal),
                               resumable=stuck is None)
        with WriterStore(self.url, self.schema, application_name=f"{self.label} assemble",
                         reconnect_seconds=self.reconnect_seconds) as store:
            self.assemble(store)

    def assemble(self, store: WriterStore) -> None:
        """Commit the documents tasks staged in part, each whole; then drop the staged rows."""
        docs = store.staged_documents(self.run_id, self.coll.name)
        for d in docs:
            table, repeats = _dedupe(pa.concat_tables(store.staged_pieces(self.run_id, self.coll.name, d)),
                                     self.position)
            self.stats.duplicate_rows += repeats
            need = table.column("doc_rows")[0].as_py() or 1
            head = _head(table, 0)
            if _whole(table, self.position):
                self._commit(store, table, self.stats, ASSEMBLED_TASK)
            elif not self._committed(store, head):
                missing = sorted(set(range(need)) - set(_seqs(table, self.position)))
                self._fail(store, head, "sink", "IncompleteDocument",
                           f"received {table.num_rows} of {need} rows (missing {self.position} {missing[:10]}"
                           f"{' …' if len(missing) > 10 else ''}); it will be retried", self.stats)
            else:  # a retried block repeated part of a document another task committed whole
                self.stats.duplicate_rows += table.num_rows
            store.unstage(self.run_id, self.coll.name, d)
        if docs:
            log.info("%s: %d documents split across write tasks, assembled whole", self.label, len(docs))

    def _committed(self, store: WriterStore, head: dict) -> bool:
        """Whether another task committed this document whole in this run (a retried block repeated part of it)."""
        return store.done_in_run(self.coll.name, head["source_path"], self.run_id)

    def on_write_failed(self, error: Exception) -> None:
        log.warning("%s: a write task failed (%s); documents it did not commit stay pending for the next run",
                    self.label, error)
