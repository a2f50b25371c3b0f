"""Connections for searches that run at once (`corpusmill serve`): a psycopg_pool ConnectionPool whose
connections are read-only and bounded by a statement timeout, each lent to one search at a time as a
PgStore.

A psycopg connection serves one thread at a time, so one connection shared by a service's threads
serialises every request; with a pool each request has its own, and the database's work (most of a
search: BM25, the HNSW scans, the passages) overlaps. Every connection starts read-only
(default_transaction_read_only): a search that tried to write would fail instead of writing.
"""

from __future__ import annotations

import contextlib
import logging

import psycopg
from pgvector.psycopg import register_vector
from psycopg_pool import ConnectionPool, PoolTimeout

from jobs.errors import UnreachableError
from jobs.store.connection import DatabaseUnavailable
from jobs.store.pgvector import PgStore

log = logging.getLogger(__name__)


class Busy(UnreachableError):
    """Every connection stayed in use for as long as a request may wait for one."""


def session_options(statement_timeout_s: float | None, read_only: bool = True) -> str:
    """libpq `options` for a search connection: the statement timeout (0 or None: none), read-only, and the
    server-side keepalives jobs/store/connection.py sets."""
    opts = ["-c tcp_keepalives_idle=60", "-c tcp_keepalives_interval=10", "-c tcp_keepalives_count=6"]
    if read_only:
        opts.append("-c default_transaction_read_only=on")
    if statement_timeout_s:
        opts.append(f"-c statement_timeout={max(1, round(statement_timeout_s * 1000))}")
    return " ".join(opts)


class _Lent(PgStore):
    """A PgStore over a connection the pool lent. A connection that breaks is not replaced here (the
    request fails, 503, and the pool drops the connection when it comes back)."""

    def __init__(self, conn: psycopg.Connection, url: str, schema: str):
        self._lent = conn
        super().__init__(url, schema, application_name="corpusmill serve")
        self._vector_ready = True  # the pool's configure registered the vector types

    def _connect(self) -> psycopg.Connection:
        return self._lent

    def reconnect(self) -> None:
        raise DatabaseUnavailable("the connection to PostgreSQL broke during the search")

    def close(self) -> None:  # the pool owns the connection
        pass


class ReadPool:
    """`size` read-only connections to `url`; `lend()` gives one to a search as a PgStore. A request
    waits up to `wait_s` for a free connection, then Busy."""

    def __init__(self, url: str, schema: str, size: int, statement_timeout_s: float | None, wait_s: float = 30.0):
        self.url, self.schema, self.size, self.wait_s = url, schema, size, wait_s
        self.pool = ConnectionPool(
            url, min_size=size, max_size=size, open=False, timeout=wait_s, name="corpusmill-search",
            configure=register_vector,
            # Each connection is checked as it is lent (an empty query): one the server dropped (a restart,
            # an idle timeout, a terminated backend) is replaced then, instead of failing a search with 503.
            check=ConnectionPool.check_connection,
            kwargs={"autocommit": True, "application_name": "corpusmill serve", "connect_timeout": 10,
                    "options": session_options(statement_timeout_s)})
        try:
            self.pool.open(wait=True, timeout=30)
        except PoolTimeout as exc:
            self.pool.close()
            raise UnreachableError(f"could not open {size} connections to PostgreSQL within 30 s; check "
                                   "--database-url / DATABASE_URL and the server's max_connections") from exc

    @contextlib.contextmanager
    def lend(self):
        try:
            conn = self.pool.getconn()
        except PoolTimeout as exc:
            raise Busy(f"all {self.size} database connections stayed busy for {self.wait_s:g} s; "
                       "try again, or start the service with a larger --pool-size") from exc
        try:
            yield _Lent(conn, self.url, self.schema)
        finally:
            self.pool.putconn(conn)  # a broken connection is dropped and replaced by the pool

    def close(self) -> None:
        self.pool.close()
