"""HNSW index builds at size: parallel workers, memory for the graph, and progress while it runs.

pgvector builds an HNSW graph in memory (`maintenance_work_mem`) with parallel workers; once the graph
outgrows that memory the build goes on inserting into the index on disk, orders of magnitude slower.
So the build session gets enough memory for its graph (an estimate from the rows and their width) up
to a configured ceiling, says so when that is not enough, and reports PostgreSQL's own progress view
(`pg_stat_progress_create_index`) from a second connection while it runs.
"""

from __future__ import annotations

import logging
import os
import threading
import time

import psycopg
from psycopg import sql

log = logging.getLogger(__name__)

PROGRESS_SECONDS = 10.0  # a progress line at most this often
GRAPH_OVERHEAD = 1.2  # allocation slack beyond what graph_bytes counts


def graph_bytes(rows: int, value_bytes: float, m: int) -> int:
    """What pgvector's in-memory HNSW graph of `rows` takes: each element's value, its layer-0
    neighbour list (2m candidates of 16 bytes: a pointer, a distance, a flag; upper layers add ~1/m of
    that) and its element header, with allocation slack."""
    return int(rows * (value_bytes + 2 * m * 16 * (1 + 1 / m) + 128) * GRAPH_OVERHEAD)


def parallel_workers(conn, url: str) -> int:
    """Build workers: on this machine's server (a Unix socket) its cores but one (the leader builds
    too), as many as its worker processes allow, since no one else sized them; on another server its
    own `max_parallel_workers`, which its administrator sized."""
    server = conn.execute("SELECT current_setting('max_parallel_workers')::int, "
                          "current_setting('max_worker_processes')::int").fetchone()
    if _local(conn):
        return max(0, min((os.cpu_count() or 2) - 1, server[1] - 1))
    return max(0, min(server[0], server[1] - 1))


def use_workers(conn, url: str) -> int:
    """The caller's transaction set to build an index with parallel_workers (pgvector's HNSW, and GIN,
    which PostgreSQL 18 builds in parallel): the maintenance workers, and the session's share of the
    server's worker pool (a session setting, raised for this build only). Returns the workers."""
    workers = parallel_workers(conn, url)
    conn.execute(sql.SQL("SET LOCAL max_parallel_maintenance_workers = {}").format(sql.Literal(workers)))
    if workers > conn.execute("SELECT current_setting('max_parallel_workers')::int").fetchone()[0]:
        conn.execute(sql.SQL("SET LOCAL max_parallel_workers = {}").format(sql.Literal(workers)))
    return workers


def _local(conn) -> bool:
    host = conn.info.host or ""
    return host.startswith("/") or host == ""


def memory_setting(needed: int, ceiling_mb: int, current_kb: int) -> tuple[int, str | None]:
    """(maintenance_work_mem in kB for the build, a warning or None): the graph's estimate, never less
    than the server's own setting, never more than the ceiling."""
    needed_kb = needed // 1024 + 1
    ceiling_kb = ceiling_mb * 1024
    if needed_kb <= current_kb:
        return current_kb, None
    if needed_kb <= ceiling_kb:
        return needed_kb, None
    return max(ceiling_kb, current_kb), (
        f"the HNSW graph needs about {needed_kb / 1024 ** 2:.1f} GB of memory to build in one pass, more than "
        f"database.index_memory_mb ({ceiling_mb} MB): the build will go on on disk, much slower. Raise "
        f"database.index_memory_mb (the server must have that memory free) for a faster build")


class Progress:
    """Logs the build's phase and counts from pg_stat_progress_create_index, from its own connection."""

    def __init__(self, url: str, pid: int, label: str):
        self.url, self.pid, self.label = url, pid, label
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="index-progress")

    def __enter__(self) -> Progress:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        try:
            with psycopg.connect(self.url, autocommit=True) as conn:
                while not self._stop.wait(PROGRESS_SECONDS):
                    row = conn.execute(
                        "SELECT phase, tuples_done, tuples_total, blocks_done, blocks_total "
                        "FROM pg_stat_progress_create_index WHERE pid = %s", (self.pid,)).fetchone()
                    if row:
                        log.info("%s: %s", self.label, describe(*row))
        except psycopg.Error as exc:  # progress is a courtesy: a build never fails for it
            log.debug("index progress unavailable: %s", exc)


def describe(phase: str, tuples_done: int, tuples_total: int, blocks_done: int, blocks_total: int) -> str:
    if tuples_total:
        return f"{phase}, {tuples_done:,} of {tuples_total:,} rows ({100 * tuples_done / tuples_total:.0f} %)"
    if blocks_total:
        return f"{phase}, {blocks_done:,} of {blocks_total:,} blocks ({100 * blocks_done / blocks_total:.0f} %)"
    return phase


def build_hnsw(conn, url: str, table: sql.Composable, index: str, key: sql.Composable, rows: int,
               value_bytes: float, m: int, ef_construction: int, memory_mb: int, label: str) -> None:
    """CREATE INDEX … USING hnsw (`key`: the column or expression and its operator class) with the
    session sized for it; pgvector's own notices (a graph that stopped fitting) are logged as warnings."""
    current_kb = conn.execute("SELECT setting::bigint FROM pg_settings WHERE name = 'maintenance_work_mem'").fetchone()[0]
    memory_kb, warning = memory_setting(graph_bytes(rows, value_bytes, m), memory_mb, current_kb)
    if warning:
        log.warning("%s: %s", label, warning)
    def notice(diag) -> None:
        log.warning("%s: %s", label, diag.message_primary)

    conn.add_notice_handler(notice)
    try:
        with conn.transaction():
            conn.execute(sql.SQL("SET LOCAL maintenance_work_mem = {}").format(sql.Literal(f"{memory_kb}kB")))
            workers = use_workers(conn, url)
            log.info("%s: building an HNSW index over %s rows (%d parallel workers, %d MB for the graph)",
                     label, f"{rows:,}", workers, memory_kb // 1024)
            started = time.monotonic()
            with Progress(url, conn.info.backend_pid, label):
                conn.execute(sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} USING hnsw ({}) "
                                     "WITH (m = {}, ef_construction = {})").format(
                    sql.Identifier(index), table, key, sql.Literal(m), sql.Literal(ef_construction)))
        log.info("%s: HNSW index built in %.1f s", label, time.monotonic() - started)
    finally:
        conn.remove_notice_handler(notice)
