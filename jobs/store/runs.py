"""The runs table: one row per ingest, what it was given and how it ended (PgStore's share of it).

A mixin rather than functions, so callers keep `store.start_run(...)`; it needs only the store's
connection (`self.conn`) and its schema-qualified names (`self._t`).
"""

from __future__ import annotations

import json

from psycopg import sql

from jobs.store.connection import reconnecting


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
