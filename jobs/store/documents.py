"""The documents table, the checkpoint: PgStore's share of its rows outside a commit. What a plan reads
(stored_documents), what it writes before the stages run (mark_pending, mark_pending_work, record_listing),
the documents a removed text left to be re-chunked (released_documents), and the checkpoint rows a commit
writes in its own transaction (_set_documents, called by jobs/store/commits.py).

A mixin, as jobs/store/runs.py is: it needs only the store's connection (`self.conn`) and its
schema-qualified names (`self._t`).
"""

from __future__ import annotations

from psycopg import sql

from jobs.rows import storable
from jobs.sources.changes import StoredDoc
from jobs.store.connection import reconnecting

# A planned document becomes pending under its run with the listing it was planned with; its old chunks
# stay until its commit replaces them.
_PENDING_CONFLICT = ("ON CONFLICT (collection, source_path) DO UPDATE SET status = 'pending', run_id = EXCLUDED.run_id, "
                     "source_size = EXCLUDED.source_size, source_etag = EXCLUDED.source_etag, updated_at = now()")


class DocumentRows:
    @reconnecting
    def stored_documents(self, collection: str, paths: list[str] | None = None) -> dict[str, StoredDoc]:
        """The collection's documents by source path; only those of `paths` when given (a plan's page)."""
        rows = self.conn.execute(sql.SQL(
            "SELECT source_path, content_sha256, pipeline_fingerprint, status, source_size, source_etag, "
            "failed_sha256, failed_fingerprint FROM {} "
            "WHERE collection = %s" + (" AND source_path = ANY(%s)" if paths is not None else "")).format(
            self._t("documents")), (collection, paths) if paths is not None else (collection,))
        return {r[0]: StoredDoc(*r) for r in rows}

    @reconnecting
    def committed_in_run(self, collection: str, paths: list[str], run_id: str) -> set[str]:
        """Those of `paths` whose last commit was made by run `run_id` (a resumed run's later attempt)."""
        return {r[0] for r in self.conn.execute(sql.SQL(
            "SELECT source_path FROM {} WHERE collection = %s AND source_path = ANY(%s) AND status = 'done' "
            "AND run_id = %s").format(self._t("documents")), (collection, paths, run_id))}

    @reconnecting
    def record_listing(self, collection: str, files: list[tuple[str, int, str | None]]) -> None:
        """(source_path, size, listing tag) of `done` documents found unchanged in content under a new
        listing (a re-upload, a touched file), or of `failed` ones found still holding the content they
        failed on: the next plan trusts them without reading them again."""
        if not files:
            return
        with self.conn.transaction(), self.conn.cursor() as cur:
            cur.executemany(sql.SQL(
                "UPDATE {} SET source_size = %s, source_etag = %s WHERE collection = %s AND source_path = %s "
                "AND (status = 'done' OR (status = 'failed' AND failed_sha256 IS NOT NULL))").format(self._t("documents")),
                [(size, tag, collection, path) for path, size, tag in files])

    @reconnecting
    def mark_pending(self, collection: str, run_id: str, docs: list[dict]) -> None:
        """Planned documents become `pending` (old chunks stay until each is replaced), with the listing
        their content comes with (`source_size`, `source_etag`), which their commit keeps: a pending
        row's listing is never trusted (jobs/sources/discover.py), a done one's is."""
        with self.conn.transaction(), self.conn.cursor() as cur:
            cur.executemany(sql.SQL(
                "INSERT INTO {} (collection, source_path, doc_id, source_type, status, run_id, source_size, source_etag) "
                "VALUES (%s, %s, %s, %s, 'pending', %s, %s, %s) " + _PENDING_CONFLICT).format(self._t("documents")),
                [(collection, d["source_path"], d["doc_id"], d["source_type"], run_id, d.get("source_size"),
                  d.get("source_etag")) for d in docs])

    @reconnecting
    def mark_pending_work(self, collection: str, run_id: str, since: int = 0) -> None:
        """mark_pending for the run's work items from sequence number `since` on (a round of them,
        jobs/store/work_items.py), in one statement: the driver never reads them back."""
        self.conn.execute(sql.SQL(
            "INSERT INTO {docs} (collection, source_path, doc_id, source_type, status, run_id, source_size, source_etag) "
            "SELECT collection, source_path, item->>'doc_id', source_type, 'pending', run_id, source_size, source_etag "
            "FROM {work} WHERE collection = %s AND run_id = %s AND seq >= %s " + _PENDING_CONFLICT).format(
            docs=self._t("documents"), work=self._t("work_items")), (collection, run_id, since))

    @reconnecting
    def released_documents(self, collection: str) -> list[str]:
        """Documents marked pending because a text they only copied lost its holder (shared_text.release:
        pending with no run), to be re-chunked so that one of them holds it."""
        return [r[0] for r in self.conn.execute(sql.SQL(
            "SELECT source_path FROM {} WHERE collection = %s AND status = 'pending' AND run_id IS NULL "
            "ORDER BY source_path").format(self._t("documents")), (collection,))]

    def _set_documents(self, collection: str, entries: list[tuple[dict, str, int, str, str | None]],
                       keep_listing: bool = False) -> None:
        """Checkpoint rows: (doc, status, chunk_count, run_id, error) each, in one statement over arrays (a
        commit of thousands of small documents sends one statement, not one per document). A path given
        twice keeps its last entry, as one statement per row would leave it."""
        last = {doc["source_path"]: i for i, (doc, *_rest) in enumerate(entries)}
        rows = [entries[i] for i in sorted(last.values())]
        texts = [[storable(v) for v in (doc["source_path"], doc["doc_id"], doc["source_type"], doc["content_sha256"],
                                        doc["pipeline_fingerprint"], status, error, run_id)]
                 for doc, status, _count, run_id, error in rows]
        columns = list(zip(*texts)) if texts else [()] * 8
        self.conn.execute(sql.SQL(
            "INSERT INTO {} (collection, source_path, doc_id, source_type, content_sha256, pipeline_fingerprint, "
            "status, last_error, run_id, chunk_count, source_size, source_etag, updated_at) "
            "SELECT %s, u.*, now() FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::text[], "
            "%s::text[], %s::text[], %s::text[], %s::int[], %s::bigint[], %s::text[]) AS u "
            "ON CONFLICT (collection, source_path) DO UPDATE SET doc_id = EXCLUDED.doc_id, "
            "source_type = EXCLUDED.source_type, content_sha256 = EXCLUDED.content_sha256, "
            "pipeline_fingerprint = EXCLUDED.pipeline_fingerprint, status = EXCLUDED.status, "
            "chunk_count = EXCLUDED.chunk_count, run_id = EXCLUDED.run_id, last_error = EXCLUDED.last_error, "
            # The listing the content came with: the doc's own, else the one its pending row holds (an
            # ingest's, from mark_pending); a reload from Parquet has none (NULL: the next plan reads it).
            "source_size = CASE WHEN %s AND EXCLUDED.source_size IS NULL THEN {t}.source_size "
            "ELSE EXCLUDED.source_size END, "
            "source_etag = CASE WHEN %s AND EXCLUDED.source_size IS NULL THEN {t}.source_etag "
            "ELSE EXCLUDED.source_etag END, "
            "updated_at = now()").format(self._t("documents"), t=self._t("documents")),
            [collection, *[list(c) for c in columns], [count for _doc, _s, count, _r, _e in rows],
             [doc.get("source_size") for doc, *_rest in rows], [doc.get("source_etag") for doc, *_rest in rows],
             keep_listing, keep_listing])
