"""A run's write progress: the documents committed and failed so far, read from the documents table on a
connection of its own (the driver sees no rows) and drawn by jobs/progress_line.py."""

from __future__ import annotations

import logging
import threading

import psycopg
from psycopg import sql

from jobs.progress_line import ProgressLine

log = logging.getLogger("jobs.store.writers")  # the logger the write progress has always used


class Progress:
    """While a run writes: its documents committed and failed, chunks, vectors/s and the time left, read
    from the documents table on a connection of its own (the driver sees no rows) and shown by a
    ProgressLine: one line redrawn every second on a terminal (`live`; default: whether stderr is one),
    else a log line every `every` seconds when the counts moved. Where the writes ended is logged last."""

    def __init__(self, url: str, schema: str, collection: str, run_id: str, total: int, every: float = 10.0,
                 live: bool | None = None):
        self.url, self.schema, self.collection, self.run_id = url, schema, collection, run_id
        self.total, self.every = total, every
        self.line = ProgressLine(total, every, live)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="write-progress", daemon=True)

    def __enter__(self) -> Progress:
        # What the run held before these writes (a resumed run id's earlier attempt): not counted again.
        self._base = (0, 0, 0, 0)
        try:
            with psycopg.connect(self.url, autocommit=True) as conn:
                self._base = self._totals(conn)[:4]
        except Exception:  # progress is a courtesy: never fail a run over it
            log.debug("no write progress baseline", exc_info=True)
        self.line.__enter__()
        self._thread.start()
        return self

    def extend(self, documents: int) -> None:
        """More documents to write in this run (a round that re-chunks documents others released)."""
        self.total += documents
        self.line.extend(documents)

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self.line.__exit__(*exc)

    def _run(self) -> None:
        try:
            with psycopg.connect(self.url, autocommit=True, application_name=f"corpusmill progress {self.run_id}"[:63]) as conn:
                while not self._stop.wait(self.line.tick):
                    counts, work = self.read(conn)
                    self.line.update(*counts, work=work)
                counts, work = self.read(conn)
                self.line.finish(*counts, work=work)
        except Exception:  # progress is a courtesy: never fail a run over it
            log.debug("no write progress", exc_info=True)

    def read(self, conn: psycopg.Connection) -> tuple[tuple[int, int, int], tuple[int, int] | None]:
        """One sample, in one query: (documents committed, documents failed, vectors) of this attempt, and
        its work, (bytes of its documents settled, bytes of all of them) from the sizes their listing gave
        (jobs/progress_line.py Rates: what the time left is measured in; None before any is known)."""
        done, failed, vectors, settled, total = (a - b for a, b in zip(self._totals(conn), (*self._base, self._base[3])))
        return (max(0, done), max(0, failed), max(0, vectors)), ((settled, total) if total > 0 else None)

    def sample(self, conn: psycopg.Connection) -> tuple[int, int, int]:
        """(documents committed, documents failed, vectors) of the run so far (read)."""
        return self.read(conn)[0]

    def work(self, conn: psycopg.Connection) -> tuple[int, int] | None:
        """(bytes of the run's documents settled, bytes of all its documents) since this attempt began (read)."""
        return self.read(conn)[1]

    def _totals(self, conn: psycopg.Connection) -> tuple[int, int, int, int, int]:
        """(done, failed, vectors, bytes settled, bytes of all) of the run's documents, whatever attempt."""
        row = conn.execute(sql.SQL(
            "SELECT count(*) FILTER (WHERE status = 'done'), count(*) FILTER (WHERE status = 'failed'), "
            "coalesce(sum(chunk_count) FILTER (WHERE status = 'done'), 0), "
            "coalesce(sum(source_size) FILTER (WHERE status <> 'pending'), 0), coalesce(sum(source_size), 0) "
            "FROM {} WHERE collection = %s AND run_id = %s").format(sql.Identifier(self.schema, "documents")),
            (self.collection, self.run_id)).fetchone()
        return tuple(int(n) for n in row)
