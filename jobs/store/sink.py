"""The sink: gathers each document's rows, then writes Parquet and commits it to PostgreSQL.

Guarantee (the pgvector store's, per document): a document is committed only once each of its rows
`seq` 0…`doc_rows`-1 has arrived exactly once (re-batching may split them across batches; a row that
arrives twice is dropped), in one transaction with its checkpoint row. Its rows are in a Parquet
part before that commit, so Parquet holds every committed document. A document with any error row
is recorded as failed and keeps its previous chunks; so does a document the database rejects
(recorded at stage `load`), and the run goes on. A chunk whose text another document already holds
is recorded as a copy rather than stored twice (`database.shared_text`, jobs/store/shared_text.py).
A connection lost to a server restart is the store's to heal (PgStore reconnects and replays the
document's transaction); only a server that stays away stops the run.

It runs in the driver and consumes the Ray dataset's stream, which gives back-pressure for free; the
collection's advisory lock (PgStore.lock_collection, taken by the job) keeps a second run's commits
out, so commits never race each other.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field

import psycopg

from jobs.store.parquet import RunOutput
from jobs.store.pgvector import Collection, PgStore

log = logging.getLogger(__name__)

# What one document's rows can provoke: a value PostgreSQL rejects (NaN in a vector, an out-of-range
# number), a constraint, a row over a size limit, or our own check of a chunk (no embedding).
DOCUMENT_FAULTS = (psycopg.DataError, psycopg.IntegrityError, psycopg.errors.ProgramLimitExceeded, ValueError)


@dataclass
class SinkStats:
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
    # Tokens and words of embedded chunks, tallied (value -> chunks): as big as the distinct values, not the run.
    tokens: Counter = field(default_factory=Counter)
    words: Counter = field(default_factory=Counter)
    failures: list[dict] = field(default_factory=list)
    seen: set = field(default_factory=set)
    duplicate_rows: int = 0  # rows that arrived twice (dropped: each seq commits once)
    shared: int = 0  # chunks whose text another document holds: recorded, not stored again
    released: int = 0  # other documents marked pending: a text only a replaced document held is gone


class DocumentSink:
    def __init__(self, store: PgStore, coll: Collection, output: RunOutput, run_id: str, total_docs: int,
                 flush_rows: int = 2000, flush_seconds: float = 5.0, listing: dict[str, dict] | None = None,
                 share_text: bool = True):
        self.store, self.coll, self.output, self.run_id = store, coll, output, run_id
        # doc_id -> {source_size, source_etag}: the planned listing, recorded with each commit so the next
        # plan can trust the content hash without reading the source again.
        self.listing = listing or {}
        self.share_text = share_text
        self.total_docs = total_docs
        self.flush_rows, self.flush_seconds = flush_rows, flush_seconds
        self.stats = SinkStats()
        self._partial: dict[str, dict[int, dict]] = defaultdict(dict)  # doc_id -> seq -> row, until complete
        self._closed: set[str] = set()  # documents already complete: a late repeat of their rows is dropped
        self._ready: list[list[dict]] = []
        self._ready_rows = 0
        self._oldest_ready: float | None = None
        self._started = time.monotonic()
        self._last_report = 0.0
        self.seconds = 0.0  # spent writing Parquet and committing, for the runs table

    def write(self, rows: list[dict]) -> None:
        for row in rows:
            doc = row["doc_id"]
            seq = row.get("seq") or 0  # error and empty markers are a document's one row
            got = self._partial[doc] if doc not in self._closed else None
            if got is None or seq in got:
                # A block delivered twice (a retried task whose first output also arrived) repeats rows:
                # the document must still commit each seq once.
                self.stats.duplicate_rows += 1
                continue
            got[seq] = row
            if len(got) == row["doc_rows"] and set(got) == set(range(row["doc_rows"])):
                self._ready.append([got[i] for i in range(row["doc_rows"])])
                self._partial.pop(doc)
                self._closed.add(doc)
                self._ready_rows += row["doc_rows"]
                self._oldest_ready = self._oldest_ready or time.monotonic()
        if self._ready and (self._ready_rows >= self.flush_rows
                            or time.monotonic() - self._oldest_ready >= self.flush_seconds):
            self.flush()

    def flush(self) -> None:
        if not self._ready:
            return
        t0 = time.monotonic()
        ready, self._ready, self._ready_rows, self._oldest_ready = self._ready, [], 0, None
        good = [rows for rows in ready if not any(r.get("error_stage") for r in rows)]
        self.output.write_part([r for rows in good for r in rows if r["row_kind"] == "chunk"])
        for rows in ready:
            self._commit(rows)
        self.seconds += time.monotonic() - t0
        self._report()

    def _commit(self, rows: list[dict]) -> None:
        head = rows[0]
        self.stats.seen.add(head["doc_id"])
        errors = [r for r in rows if r.get("error_stage")]
        if errors:
            e = errors[0]
            self.store.record_failure(self.coll.name, head, self.run_id, e["error_stage"], e["error_class"],
                                      e["error_message"])
            self.stats.docs_failed += 1
            self.stats.failures.append({"source_path": head["source_path"], "stage": e["error_stage"],
                                        "error_class": e["error_class"], "message": e["error_message"]})
            return
        for r in rows:
            if r.get("doc_stats"):
                self.stats.text_changes.update(json.loads(r["doc_stats"]))
        chunks = [r for r in rows if r["row_kind"] == "chunk"]
        doc = head | self.listing.get(head["doc_id"], {})
        try:
            committed = self.store.commit_document(self.coll, doc, chunks, self.run_id, self.share_text)
        except DOCUMENT_FAULTS as exc:
            # The document's own fault (a value the server rejects, a missing vector): its transaction
            # rolled back, its old chunks stay, and it is recorded like a failure in any other stage.
            # Anything else (a full disk, a read-only standby, a lost server) would fail every document
            # alike: it stops the run instead, with the rest still pending.
            log.warning("%s: could not load (%s: %s)", head["source_path"], type(exc).__name__, exc)
            self._fail(head, "load", type(exc).__name__, str(exc).strip() or repr(exc))
            return
        self.stats.vectors += committed.vectors
        self.stats.shared += committed.shared
        self.stats.released += committed.released
        self.stats.docs_done += 1
        self.stats.docs_empty += not chunks
        for c in chunks:
            self.stats.chunks += 1
            self.stats.quality[c["quality"]] += 1
            self.stats.by_source_type[c["source_type"]] += 1
            if c["omitted"]:
                self.stats.omitted += 1
                self.stats.omit_reasons[c["omit_reason"].split(":")[0]] += 1
            else:
                self.stats.tokens[c["token_count"]] += 1
                self.stats.words[c["word_count"]] += 1

    def record_lost(self, planned: list[dict]) -> None:
        """Documents the pipeline never returned (it should not happen; if it does, say so and retry them)."""
        for doc in planned:
            if doc["doc_id"] not in self.stats.seen and doc["doc_id"] not in self._partial:
                self._fail(doc, "pipeline", "LostDocument",
                           "the pipeline returned no rows for this file (its block failed past its retries, "
                           "e.g. a worker killed each time it ran); it will be retried")
        for doc_id, got in list(self._partial.items()):
            head = next(iter(got.values()))
            missing = sorted(set(range(head["doc_rows"])) - set(got))
            self._fail(head, "sink", "IncompleteDocument",
                       f"received {len(got)} of {head['doc_rows']} rows (missing seq {missing[:10]}"
                       f"{' …' if len(missing) > 10 else ''}); it will be retried")
            self._partial.pop(doc_id)

    def _fail(self, doc: dict, stage: str, cls: str, message: str) -> None:
        self.store.record_failure(self.coll.name, doc, self.run_id, stage, cls, message)
        self.stats.docs_failed += 1
        self.stats.failures.append({"source_path": doc["source_path"], "stage": stage, "error_class": cls,
                                    "message": message})

    def _report(self) -> None:
        now = time.monotonic()
        done = self.stats.docs_done + self.stats.docs_failed
        if now - self._last_report < 2.0 and done < self.total_docs:
            return
        self._last_report = now
        rate = done / max(now - self._started, 1e-6)
        log.info("committed %d/%d documents (%d failed), %d chunks, %d vectors, %.1f docs/s",
                 done, self.total_docs, self.stats.docs_failed, self.stats.chunks, self.stats.vectors, rate)
