"""A write task's store: its first connection waits for a server that is restarting, and the rows of a
document the task received only in part (Ray Data split its rows across tasks) wait in `staged_rows`,
as Arrow IPC, until the driver assembles them (jobs/store/writers.py, `complete`)."""

from __future__ import annotations

import psycopg
import pyarrow as pa
from psycopg import sql

from jobs.store.connection import connect_with_backoff, reconnecting
from jobs.store.pgvector import PgStore


class WriterStore(PgStore):
    """A writer's store: its first connection waits for a server that is restarting (bounded backoff, as a
    reconnect does), and every call below, like the store's own, heals a lost connection and replays."""

    def _connect(self) -> psycopg.Connection:
        return connect_with_backoff(self.url, self.application_name, self.reconnect_seconds)

    def _staged(self) -> sql.Composed:
        return self._t("staged_rows")

    @reconnecting
    def stage(self, run_id: str, collection: str, partial: dict[str, pa.Table]) -> None:
        with self.conn.transaction(), self.conn.cursor() as cur:
            cur.executemany(sql.SQL("INSERT INTO {} (run_id, collection, doc_id, rows) VALUES (%s, %s, %s, %s)").format(
                self._staged()), [(run_id, collection, d, _ipc(t)) for d, t in partial.items()])

    @reconnecting
    def staged_documents(self, run_id: str, collection: str) -> list[str]:
        return [r[0] for r in self.conn.execute(sql.SQL(
            "SELECT DISTINCT doc_id FROM {} WHERE run_id = %s AND collection = %s ORDER BY 1").format(self._staged()),
            (run_id, collection))]

    @reconnecting
    def staged_pieces(self, run_id: str, collection: str, doc_id: str) -> list[pa.Table]:
        return [_from_ipc(r[0]) for r in self.conn.execute(sql.SQL(
            "SELECT rows FROM {} WHERE run_id = %s AND collection = %s AND doc_id = %s ORDER BY staged_at").format(
                self._staged()),
            (run_id, collection, doc_id))]

    @reconnecting
    def unstage(self, run_id: str, collection: str, doc_id: str | None = None) -> None:
        """Drop a document's staged rows (all of the run's without `doc_id`)."""
        if doc_id is None:
            self.conn.execute(sql.SQL("DELETE FROM {} WHERE run_id = %s AND collection = %s").format(self._staged()),
                              (run_id, collection))
        else:
            self.conn.execute(sql.SQL("DELETE FROM {} WHERE run_id = %s AND collection = %s AND doc_id = %s").format(
                self._staged()), (run_id, collection, doc_id))

    @reconnecting
    def done_in_run(self, collection: str, source_path: str, run_id: str) -> bool:
        row = self.conn.execute(sql.SQL("SELECT status, run_id FROM {} WHERE collection = %s AND source_path = %s").format(
            self._t("documents")), (collection, source_path)).fetchone()
        return bool(row) and row[0] == "done" and row[1] == run_id


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def _from_ipc(data: bytes) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()
