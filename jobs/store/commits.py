"""Commits: PgStore's share of what changes a document's stored chunks. `commit_documents` replaces
documents' chunks and marks their checkpoint rows `done` in one transaction (COPY from Arrow, texts another
document holds recorded as copies, not stored again: jobs/store/shared_text.py), under the run's owner
token when given (the fence, jobs/store/locks.py); `record_failure` flags a document failed and logs the
error; `delete_document` removes a document that left the input. The chunk table's BM25 pivot, which the
first commit sets (jobs/store/lexical.py), is cached here.

A mixin, as jobs/store/runs.py is: it needs the store's connection (`self.conn`), its schema,
schema-qualified names (`self._t`), the vector type's registration (`self._register_vector`), the
checkpoint rows' writer (`self._set_documents`, jobs/store/documents.py) and the pivot cache
(`self._pivots`).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass

import pyarrow as pa
from psycopg import sql

from jobs.rows import storable
from jobs.store import arrow_copy, lexical, locks, shared_text
from jobs.store.connection import reconnecting
from jobs.store.spaces import Collection


@dataclass(frozen=True)
class Committed:
    """What one document's commit stored: vectors, copies of text another document holds (not stored
    again; jobs/store/shared_text.py), and other documents marked pending because a text only this one
    held is gone."""
    vectors: int
    shared: int = 0
    released: int = 0


class DocumentCommits:
    @reconnecting
    def commit_document(self, coll: Collection, doc: dict, chunks: list[dict], run_id: str,
                        share_text: bool = True) -> Committed:
        """Replace one document's chunks (row dicts) and mark it done, atomically: commit_documents for one."""
        loaded = [dict(c, doc_id=doc["doc_id"]) for c in chunks if not c.get("omitted")]
        return self.commit_documents(coll, [doc], arrow_copy.rows_table(loaded), run_id, share_text)

    @reconnecting
    def commit_documents(self, coll: Collection, docs: list[dict], chunks: pa.Table, run_id: str,
                         share_text: bool = True, keep_listing: bool = False, owner: str | None = None) -> Committed:
        """commit_document for many documents in one transaction, from Arrow (the parallel writers' path,
        jobs/store/writers.py): each of `docs` gets exactly the rows of `chunks` (embedded chunks, in
        the order of `docs`) with its doc_id, and its checkpoint row `done`. All of them or none commit.
        `owner`: the run's owner token; the commit happens only while it owns the collection (the fence,
        jobs/store/locks.py), else OwnershipLost."""
        self._register_vector()  # a writer's store never ran migrate()
        ids = [d["doc_id"] for d in docs]
        table, registry = self._t(coll.chunk_table), self._t("shared_text")
        with self.conn.transaction():
            if owner is not None:
                locks.check_lease(self.conn, self.schema, coll.name, owner)
            old: dict[str, set] = defaultdict(set)
            for doc, sha in self.conn.execute(sql.SQL(
                    "DELETE FROM {} WHERE doc_id = ANY(%s) RETURNING doc_id, text_sha256").format(table), (ids,)):
                old[doc].add(sha)
            of_doc, hashes = chunks.column("doc_id").to_pylist(), chunks.column("text_sha256").to_pylist()
            chunks = lexical.fill(chunks)  # rows from before the terms were part of the contract
            pivot = self._pivot(coll.chunk_table, chunks)

            def copy(conn, target, rows):
                return arrow_copy.copy_table(conn, target, rows, pivot)

            if share_text:  # the stored rows' COPY, then their texts' locks (shared_text.copy_stored)
                keep = shared_text.copy_stored(self.conn, table, chunks, set().union(*old.values()), copy)
            else:
                keep = [True] * chunks.num_rows
                copy(self.conn, table, chunks)
            ids_col = chunks.column("chunk_id").to_pylist()
            copies = [(d, c, h) for d, c, h, k in zip(of_doc, ids_col, hashes, keep) if not k]
            shared_text.replace_copies(self.conn, registry, coll.name, ids, copies)
            stored = sum(keep)
            new: dict[str, set] = defaultdict(set)
            for d, h, k in zip(of_doc, hashes, keep):
                if k:
                    new[d].add(h)
            released = len(shared_text.release(self.conn, table, registry, self._t("documents"), coll.name,
                                               set().union(*(hs - new[d] for d, hs in old.items()))))
            per_doc = Counter(d for d, k in zip(of_doc, keep) if k)
            self._set_documents(coll.name, [(doc, "done", per_doc[doc["doc_id"]], run_id, None) for doc in docs],
                                keep_listing)
        self._ensure_statistics(coll.chunk_table, len(docs), chunks.num_rows)
        return Committed(stored, len(copies), released)

    def _ensure_statistics(self, table: str, docs: int, rows: int) -> None:
        """After a commit into a chunk table the server has never analysed (new, or emptied), give the
        planner what each commit's lookups need, now instead of when autovacuum comes by. Without
        statistics it prices `doc_id = ANY(…)` of a commit's hundred documents at half the table and reads
        all of it, in every commit until then: a bulk load spent most of its time rereading the table it
        was filling. An ANALYZE of these first rows alone would fix doc_id's distinct count at theirs
        (a sample that is the whole table counts its values as all there are), so doc_id's count is first
        declared a share of the rows, documents per row as this commit has them (`n_distinct`, which every
        later ANALYZE keeps): as the table grows, a document stays a few rows of it and the lookups go
        through the indexes. Checked once per table and connection."""
        if table in self._analysed:
            return
        never = self.conn.execute("SELECT reltuples < 0 FROM pg_class WHERE oid = to_regclass(%s)",
                                  (self._t(table).as_string(self.conn),)).fetchone()
        if never and never[0]:
            if not rows:
                return  # nothing stored yet to analyse: the next commit does it
            share = min(max(docs / rows, 0.001), 1.0)
            self.conn.execute(sql.SQL("ALTER TABLE {} ALTER COLUMN doc_id SET (n_distinct = {})").format(
                self._t(table), sql.Literal(-round(share, 4))))
            self.conn.execute(sql.SQL("ANALYZE {} (doc_id, text_sha256, chunk_id)").format(self._t(table)))
        self._analysed.add(table)

    @reconnecting
    def shared_text_counts(self, coll: Collection) -> dict:
        return shared_text.counts(self.conn, self._t("shared_text"), self._t("documents"), coll.name)

    @reconnecting
    def record_failure(self, collection: str, doc: dict, run_id: str, stage: str, error_class: str,
                       message: str, retryable: bool = True, owner: str | None = None) -> None:
        """The document stays as it was (old chunks kept), flagged failed, and the error is logged. A failure
        that is not `retryable` was the content's own: the content (`doc`'s content_sha256) and pipeline it
        failed under are kept, and the plan leaves the document failed until either changes
        (jobs/sources/changes.py); a retryable one is retried by the next run."""
        settled = [None, None] if retryable else [doc.get("content_sha256"), doc.get("pipeline_fingerprint")]
        with self.conn.transaction():
            if owner is not None:  # the fence, as for a commit
                locks.check_lease(self.conn, self.schema, collection, owner)
            self.conn.execute(sql.SQL(
                "INSERT INTO {} (run_id, collection, source_path, stage, error_class, message, retryable, "
                "content_sha256, pipeline_fingerprint) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)").format(
                self._t("errors")),  # what it failed on: a document lost run after run settles (jobs/ingest.py)
                storable([run_id, collection, doc["source_path"], stage, error_class, message]) + [
                    retryable, doc.get("content_sha256"), doc.get("pipeline_fingerprint")])
            self.conn.execute(sql.SQL(
                "UPDATE {} SET status = 'failed', last_error = %s, run_id = %s, failed_sha256 = %s, "
                "failed_fingerprint = %s, updated_at = now() WHERE collection = %s AND source_path = %s").format(
                self._t("documents")),
                storable([f"[{stage}] {error_class}: {message}"[:2000], run_id, *settled, collection,
                          doc["source_path"]]))

    @reconnecting
    def delete_document(self, coll: Collection, source_path: str, released: list[str] | None = None) -> int:
        """Remove a document that left the input: its chunks, its recorded copies and its checkpoint row,
        together. Returns the chunks removed; `released` gets the paths of documents marked pending
        because they only recorded a copy of a text this one held (jobs/store/shared_text.py)."""
        table, registry = self._t(coll.chunk_table), self._t("shared_text")
        with self.conn.transaction():
            row = self.conn.execute(sql.SQL(
                "DELETE FROM {} WHERE collection = %s AND source_path = %s RETURNING doc_id").format(
                self._t("documents")), (coll.name, source_path)).fetchone()
            if not row:
                return 0
            old = [r[0] for r in self.conn.execute(sql.SQL(
                "DELETE FROM {} WHERE doc_id = %s RETURNING text_sha256").format(table), (row[0],))]
            shared_text.record_copies(self.conn, registry, coll.name, row[0], [])
            paths = shared_text.release(self.conn, table, registry, self._t("documents"), coll.name, set(old))
            if released is not None:
                released += paths
            return len(old)

    def _pivot(self, table: str, rows: pa.Table) -> float:
        """The table's BM25 pivot: set by its first commit from `rows`' mean length, fixed after (cached)."""
        found = self._pivots.get(table)
        if found is None:
            found = lexical.pivot(self.conn, self.schema, table)
            if found is None:  # not remembered: the commit that sets it may yet roll back
                if not rows.num_rows:  # documents without chunks (empty pages): no length to set it from
                    return lexical.DEFAULT_PIVOT
                return lexical.settle_pivot(self.conn, self.schema, table, lexical.mean_length(rows))
            self._pivots[table] = found
        return found
