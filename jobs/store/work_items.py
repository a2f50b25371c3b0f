"""A run's work items in the database instead of the driver's memory (jobs/store/migrations/006_work_items.sql).

The plan hands each listing page's files to `WorkItems.add` as it goes; the run then marks them pending
in one statement (PgStore.mark_pending_work), and the dataset's first stage (`read_work_items`, on the workers)
reads them back by ranges of their sequence number, so what the driver holds is a few hundred ranges,
not one dict per file. A small run in this process, or one whose driver reads every file
(`input.read_via_driver`), takes its items whole (`items`): the first holds a handful, the second the
files' bytes anyway.
"""

from __future__ import annotations

import json
import logging

import psycopg
from psycopg import sql

from jobs.store.connection import connect, connect_with_backoff, first_line

log = logging.getLogger(__name__)
RECONNECT_SECONDS = 60.0  # as database.reconnect_seconds' default: a server restart mid-run


class WorkItems:
    """This run's work items; the connection is this object's own (`corpusmill plan <run_id>` in
    pg_stat_activity). Entering clears what earlier runs of the collection left (a killed driver), but
    never the items of a run whose connection is still alive: holding the collection's lock does not
    mean no other run is going (one whose driver lost the lock still reads its items until its fence
    stops it, jobs/store/locks.py). Leaving deletes this run's rows."""

    def __init__(self, url: str, schema: str, collection: str, run_id: str):
        self.url, self.schema, self.collection, self.run_id = url, schema, collection, run_id
        self.conn, self.added = None, 0
        self.since = 0  # the first item of the current round: what counts, ranges and items read

    def begin_round(self) -> int:
        """Items added from now on form a round of their own (a run's second pass: documents re-chunked
        to hold text an updated document let go, jobs/ingest.py); returns its first sequence number."""
        self.since = self.added
        return self.since

    def __enter__(self) -> WorkItems:
        self.conn = connect(self.url, self.application_name(self.run_id))
        self.conn.execute(sql.SQL(
            "DELETE FROM {} w WHERE w.collection = %s AND (w.run_id = %s OR NOT EXISTS ("
            "SELECT 1 FROM pg_stat_activity a WHERE a.application_name = left('corpusmill plan ' || w.run_id, 63)))"
        ).format(self._t), (self.collection, self.run_id))
        return self

    @staticmethod
    def application_name(run_id: str) -> str:
        """The connection's name, by which a later run tells a live run's items from a dead one's."""
        return f"corpusmill plan {run_id}"[:63]

    def __exit__(self, *exc) -> None:
        try:
            self.conn.execute(sql.SQL("DELETE FROM {} WHERE run_id = %s").format(self._t), (self.run_id,))
        except Exception:  # the server is what failed: the next run of the collection clears them
            pass
        finally:
            self.conn.close()

    def _execute(self, stmt: sql.Composable, params) -> psycopg.Cursor:
        """One statement on this object's connection, again on a new one if the server cut it (a restart
        mid-run: the statements here are reads, or an INSERT the server rolled back with the connection)."""
        try:
            return self.conn.execute(stmt, params)
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            if not (self.conn.broken or self.conn.closed):
                raise
            log.warning("lost the connection to PostgreSQL (%s); reconnecting", first_line(exc))
            self.conn.close()
            self.conn = connect_with_backoff(self.url, self.application_name(self.run_id), RECONNECT_SECONDS)
            return self.conn.execute(stmt, params)

    @property
    def _t(self) -> sql.Composed:
        return sql.Identifier(self.schema, "work_items")

    def add(self, items: list[dict], listings: list[tuple[int | None, str | None]]) -> None:
        """Work items in plan order, each with the listing (size, etag) its pending row will keep."""
        with self.conn.cursor() as cur, cur.copy(sql.SQL(
                "COPY {} (run_id, collection, seq, source_type, source_path, source_size, source_etag, item) "
                "FROM STDIN").format(self._t)) as copy:
            for item, (size, etag) in zip(items, listings):
                copy.write_row((self.run_id, self.collection, self.added, item["source_type"], item["source_path"],
                                size, etag, json.dumps(item)))
                self.added += 1

    def repeat(self, paths: list[str]) -> int:
        """This run's items of `paths` again, as the current round (begin_round first): a second pass over
        documents the first one lost (jobs/ingest.py). Returns how many."""
        added = self._execute(sql.SQL(
            "INSERT INTO {t} (run_id, collection, seq, source_type, source_path, source_size, source_etag, item) "
            "SELECT run_id, collection, %s + row_number() OVER (ORDER BY seq) - 1, source_type, source_path, "
            "source_size, source_etag, item FROM (SELECT DISTINCT ON (source_path) * FROM {t} WHERE run_id = %s "
            "AND source_path = ANY(%s) AND seq < %s ORDER BY source_path, seq) w").format(t=self._t),
            (self.added, self.run_id, paths, self.since)).rowcount
        self.added += added
        return added

    def counts(self) -> dict[str, int]:
        """{source_type: items}"""
        return dict(self._execute(sql.SQL(
            "SELECT source_type, count(*) FROM {} WHERE run_id = %s AND seq >= %s GROUP BY 1").format(self._t),
            (self.run_id, self.since)))

    def planned(self, paths: list[str], every_round: bool = False) -> set[str]:
        """Which of `paths` the current round already holds (a round's items are still to be processed;
        an earlier round's were processed, and a document released since must go through again);
        `every_round`: which the run held in any round."""
        rows = self._execute(sql.SQL("SELECT source_path FROM {} WHERE run_id = %s AND source_path = ANY(%s) "
                                     "AND seq >= %s").format(self._t),
                             (self.run_id, paths, 0 if every_round else self.since))
        return {r[0] for r in rows}

    def ranges(self, source_type: str, per_range: int) -> list[dict]:
        """Consecutive runs of `per_range` items of one source type, as rows for read_work_items."""
        rows = self._execute(sql.SQL(
            "SELECT min(seq), max(seq) FROM (SELECT seq, (row_number() OVER (ORDER BY seq) - 1) / %s AS part "
            "FROM {} WHERE run_id = %s AND source_type = %s AND seq >= %s) s GROUP BY part ORDER BY 1").format(self._t),
            (per_range, self.run_id, source_type, self.since))
        return [{"run_id": self.run_id, "source_type": source_type, "first": a, "last": b} for a, b in rows]

    def items(self, source_type: str) -> list[dict]:
        """All items of one source type, in plan order."""
        return [r[0] for r in self._execute(sql.SQL(
            "SELECT item FROM {} WHERE run_id = %s AND source_type = %s AND seq >= %s ORDER BY seq").format(self._t),
            (self.run_id, source_type, self.since))]

    def lost(self, runs: int) -> list[tuple[dict, bool]]:
        """The run's documents still pending after its write (the pipeline never returned them: a block
        failed past its retries, its worker killed each time), each as the document its work item read
        (path, id, type, content sha256, pipeline fingerprint) and whether it was lost in each of the
        `runs` - 1 runs before on that same content and pipeline: its last errors, newest first, are all
        LostDocument on it (a run that failed it otherwise, or read other content, breaks the chain)."""
        rows = self._execute(sql.SQL(
            "SELECT DISTINCT ON (d.source_path) d.source_path, d.doc_id, d.source_type, w.item->>'content_sha256', "
            "w.item->>'pipeline_fingerprint', (SELECT count(*) FILTER (WHERE e.error_class = 'LostDocument' "
            "  AND e.content_sha256 = w.item->>'content_sha256' "
            "  AND e.pipeline_fingerprint = w.item->>'pipeline_fingerprint') "
            "  FROM (SELECT error_class, content_sha256, pipeline_fingerprint FROM {errors} "
            "        WHERE collection = d.collection AND source_path = d.source_path AND run_id <> d.run_id "
            "        ORDER BY id DESC LIMIT %s) e) "
            "FROM {docs} d LEFT JOIN {work} w ON w.run_id = d.run_id AND w.source_path = d.source_path "
            "WHERE d.collection = %s AND d.run_id = %s AND d.status = 'pending' ORDER BY d.source_path, w.seq DESC"
        ).format(errors=sql.Identifier(self.schema, "errors"), docs=sql.Identifier(self.schema, "documents"),
                 work=self._t), (runs - 1, self.collection, self.run_id))
        return [({"source_path": path, "doc_id": doc, "source_type": kind, "content_sha256": sha,
                  "pipeline_fingerprint": fp}, sha is not None and before >= runs - 1)
                for path, doc, kind, sha, fp, before in rows]


def read_work_items(rows: list[dict], *, url: str, schema: str, reconnect_seconds: float = 0) -> list[dict]:
    """Stage: ranges (WorkItems.ranges) -> the work items they cover, read on the worker. A server that
    is away is waited for up to `reconnect_seconds` (database.reconnect_seconds), as the writers do: a
    failed read would drop its range's documents from the run (recorded lost, retried by the next)."""
    out = []
    for r in rows:
        name = f"corpusmill work items {r['run_id']}"
        with (connect_with_backoff(url, name, reconnect_seconds) if reconnect_seconds else connect(url, name)) as conn:
            out.extend(row[0] for row in conn.execute(sql.SQL(
                "SELECT item FROM {} WHERE run_id = %s AND source_type = %s AND seq BETWEEN %s AND %s ORDER BY seq")
                .format(sql.Identifier(schema, "work_items")), (r["run_id"], r["source_type"], r["first"], r["last"])))
    return out
