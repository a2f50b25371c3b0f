"""The runs table (one row per ingest: what it was given, how it ended) and the collection status that
reports it with the checkpoint's counts: PgStore's share of both.

A mixin rather than functions, so callers keep `store.start_run(...)`; it needs only the store's
connection (`self.conn`) and its schema-qualified names (`self._t`).
"""

from __future__ import annotations

import json

from psycopg import sql

from jobs.errors import UserError
from jobs.store.connection import reconnecting


class UnknownCollection(UserError, LookupError):
    def __str__(self) -> str:  # LookupError would quote the message like a dict key
        return str(self.args[0])


class RunRecords:
    @reconnecting
    def start_run(self, run_id: str, collection: str, config: dict, fingerprint: str, output_dir: str) -> None:
        self.conn.execute(sql.SQL(
            "INSERT INTO {} (run_id, collection, config, pipeline_fingerprint, output_dir) VALUES (%s, %s, %s, %s, %s) "
            "ON CONFLICT (run_id) DO UPDATE SET status = 'running', finished_at = NULL").format(self._t("runs")),
            (run_id, collection, json.dumps(config), fingerprint, output_dir))

    @reconnecting
    def finish_run(self, run_id: str, status: str, counts: dict, stage_stats: dict) -> None:
        self.conn.execute(sql.SQL(
            "UPDATE {} SET finished_at = now(), status = %s, counts = %s, stage_stats = %s WHERE run_id = %s"
        ).format(self._t("runs")), (status, json.dumps(counts), json.dumps(stage_stats), run_id))

    def abandon_run(self, run_id: str, counts: dict) -> None:
        """A run that stopped before it settled: aborted, unless it already has an outcome (one that
        reached finish_run, or _stopped's own record). Not replayed on a reconnect: a database that is
        gone cannot be told, and the run's next attempt records it again."""
        self.conn.execute(sql.SQL(
            "UPDATE {} SET finished_at = now(), status = 'aborted', counts = %s WHERE run_id = %s AND status = 'running'"
        ).format(self._t("runs")), (json.dumps(counts), run_id))

    @reconnecting
    def run_document_counts(self, collection: str, run_id: str) -> dict:
        """The run's documents by status: done, failed, pending."""
        counts = dict(self.conn.execute(sql.SQL(
            "SELECT status, count(*) FROM {} WHERE collection = %s AND run_id = %s GROUP BY status").format(
            self._t("documents")), (collection, run_id)).fetchall())
        return {s: counts.get(s, 0) for s in ("done", "failed", "pending")}

    @reconnecting
    def pending_of_run(self, collection: str, run_id: str) -> list[dict]:
        """The run's documents still pending (after its write: the ones the pipeline never returned)."""
        rows = self.conn.execute(sql.SQL(
            "SELECT source_path, doc_id, source_type FROM {} WHERE collection = %s AND run_id = %s "
            "AND status = 'pending' ORDER BY source_path").format(self._t("documents")), (collection, run_id))
        return [{"source_path": r[0], "doc_id": r[1], "source_type": r[2]} for r in rows]

    @reconnecting
    def run_output_dir(self, run_id: str | None = None, collection: str | None = None) -> str | None:
        """Where a run wrote its Parquet and QA files: that run's, or the latest (of a collection)."""
        where, params = [], []
        if run_id:
            where.append(sql.SQL("run_id = %s"))
            params.append(run_id)
        if collection:
            where.append(sql.SQL("collection = %s"))
            params.append(collection)
        cond = sql.SQL(" WHERE ") + sql.SQL(" AND ").join(where) if where else sql.SQL("")
        row = self.conn.execute(sql.SQL("SELECT output_dir FROM {}{} ORDER BY started_at DESC LIMIT 1").format(
            self._t("runs"), cond), params).fetchone()
        return row[0] if row else None

    @reconnecting
    def status(self, collection: str) -> dict:
        coll = self.get_collection(collection)
        if coll is None:
            raise UnknownCollection(f"no collection named {collection!r}")
        counts = dict(self.conn.execute(sql.SQL(
            "SELECT status, count(*) FROM {} WHERE collection = %s GROUP BY status").format(self._t("documents")),
            (collection,)).fetchall())
        # The checkpoint rows count each document's stored chunks (in the transaction that stores them): a
        # scan of the narrow documents table, not of the chunk table, after every run.
        chunks = self.conn.execute(sql.SQL("SELECT coalesce(sum(chunk_count), 0) FROM {} WHERE collection = %s").format(
            self._t("documents")), (collection,)).fetchone()[0]
        failed = self.conn.execute(sql.SQL(
            "SELECT source_path, last_error FROM {} WHERE collection = %s AND status = 'failed' ORDER BY source_path"
        ).format(self._t("documents")), (collection,)).fetchall()
        pending = [r[0] for r in self.conn.execute(sql.SQL(
            "SELECT source_path FROM {} WHERE collection = %s AND status = 'pending' ORDER BY source_path"
        ).format(self._t("documents")), (collection,))]
        runs = self.conn.execute(sql.SQL(
            "SELECT run_id, status, started_at, finished_at, counts FROM {} WHERE collection = %s "
            "ORDER BY started_at DESC LIMIT 5").format(self._t("runs")), (collection,)).fetchall()
        return {
            "collection": collection,
            "embedding_model": coll.embedding_model,
            "dimension": coll.dimension,
            "documents": {k: int(counts.get(k, 0)) for k in ("done", "failed", "pending")},
            "chunks": int(chunks),
            "failed": [{"source_path": p, "error": e} for p, e in failed],
            "pending": pending,
            "last_runs": [
                {"run_id": r[0], "status": r[1], "started_at": r[2].isoformat(),
                 "finished_at": r[3].isoformat() if r[3] else None, "counts": r[4]}
                for r in runs
            ],
        }
