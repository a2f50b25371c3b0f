"""PostgreSQL + pgvector: the store a job writes through, `PgStore`: one connection (opened here, opened
again after the server restarted: `reconnect`, and jobs.store.connection's `reconnecting`, which replays a
call the broken connection cut short) and the schema-qualified names (`_t`) every part of it uses. What the
store does lives in one mixin per job:

- jobs/store/locks.py (CollectionLocks): one writer per collection, its lock and owner token;
- jobs/store/migrate.py (Migrations): the migrations, and the read side's schema check;
- jobs/store/collection_ddl.py (CollectionDDL): collections, their chunk tables and every index on them;
- jobs/store/documents.py (DocumentRows): the documents table, the checkpoint's rows a plan reads and writes;
- jobs/store/commits.py (DocumentCommits): a document's chunks replaced, failed or deleted, atomically;
- jobs/store/runs.py (RunRecords): the runs table and a collection's status;
- jobs/store/spaces.py (EmbeddingSpaces): a collection's embedding spaces, and a re-embed's switch.

Guarantee: `commit_document` replaces one document's chunks and marks its documents row `done` in a
single transaction. A crash at any moment leaves each document either fully old or fully new, and
the documents table says which; a rerun therefore resumes exactly, and a retried write replaces
rather than duplicates (chunk_id is the primary key and the old rows are deleted first).

Identifiers that come from config (schema, collection → table names) go through sql.Identifier.
Their names come from jobs.store.names. The search that reads what this store wrote is jobs/search/.
"""

from __future__ import annotations

import logging
import re

import psycopg
from psycopg import sql

from jobs.errors import ConfigError, UnreachableError
from jobs.sources.changes import StoredDoc  # noqa: F401 (part of this module's API)
from jobs.store import locks
from jobs.store.arrow_copy import CHUNK_COLUMNS  # noqa: F401 (part of this module's API)
from jobs.store.chunk_view import SQL_TYPES as _SQL_TYPES  # noqa: F401 (part of this module's API)
from jobs.store.chunk_view import VIEW_COLUMNS  # noqa: F401 (part of this module's API)
from jobs.store.collection_ddl import DEFAULT_INDEX_MEMORY_MB, CollectionDDL  # noqa: F401 (part of this module's API)
from jobs.store.commits import Committed, DocumentCommits  # noqa: F401 (part of this module's API)
from jobs.store.connection import connect, connect_with_backoff, reconnecting
from jobs.store.documents import DocumentRows
from jobs.store.migrate import Migrations
from jobs.store.runs import RunRecords, UnknownCollection  # noqa: F401 (part of this module's API)
from jobs.store.schema import MIGRATIONS_DIR  # noqa: F401 (part of this module's API)
from jobs.store.spaces import Collection, CollectionMismatch, EmbeddingSpaces  # noqa: F401 (part of this module's API)

log = logging.getLogger(__name__)


class PgStore(locks.CollectionLocks, Migrations, CollectionDDL, DocumentRows, DocumentCommits, RunRecords,
              EmbeddingSpaces):
    def __init__(self, url: str, schema: str = "corpusmill", *, application_name: str = "corpusmill",
                 reconnect_seconds: float = 60.0):
        self.url, self.schema, self.application_name = url, schema, application_name
        self.reconnect_seconds = reconnect_seconds
        self._vector_ready = False
        self._locks: dict[str, int] = {}  # collection -> advisory lock key held by this session
        self.owner_tokens: dict[str, str] = {}  # collection -> this run's owner token (locks.take_lease)
        self._depth = 0  # store calls in progress (only the outermost replays after a reconnect)
        self._pivots: dict[str, float] = {}  # chunk table -> its BM25 pivot, once set (jobs/store/lexical.py)
        self._analysed: set[str] = set()  # chunk tables this store saw with statistics (commits.py)
        try:
            self.conn = self._connect()
        except psycopg.OperationalError as exc:
            raise UnreachableError(
                f"cannot connect to PostgreSQL ({exc}); check --database-url / DATABASE_URL, "
                "or unset them to use the embedded server (`corpusmill db start`)"
            ) from exc
        except psycopg.ProgrammingError as exc:  # libpq could not read the URL itself
            # Its message quotes the URL, or the piece it choked on (a password's stray %): none of it shown.
            said = re.sub(r'"[^"]*"', '"…"', str(exc).splitlines()[0].replace(url, "<the URL>"))
            raise ConfigError(f"the database URL is not one PostgreSQL can read (libpq: {said}); give "
                              "postgresql://USER:PASSWORD@HOST:PORT/DB in --database-url / DATABASE_URL") from None

    def _connect(self) -> psycopg.Connection:
        return connect(self.url, self.application_name)

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> PgStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- faults of the server -----------------------------------------------------------------
    def connection_lost(self) -> bool:
        return self.conn.closed or self.conn.broken

    def reconnect(self) -> None:
        """A new connection after the server restarted, with bounded exponential backoff (0.5 s doubling
        to 8 s, `reconnect_seconds` in all). The session's advisory locks died with the old connection:
        they are taken again, and if another run took one meanwhile this run must stop writing."""
        conn = connect_with_backoff(self.url, self.application_name, self.reconnect_seconds)
        try:
            self.conn.close()
        except Exception:  # the old connection is broken; closing it is only tidiness
            pass
        self.conn = conn
        if self._vector_ready:
            self._vector_ready = False
            self._register_vector()
        locks.retake(self.conn, self._locks, self.schema, self.owner_tokens)
        log.info("reconnected to PostgreSQL")

    def _t(self, name: str) -> sql.Composed:
        return sql.Identifier(self.schema, name)

    @reconnecting
    def read(self, fn, *args, **kwargs):
        """`fn(self, *args, **kwargs)`, a read-only function over this store's connection (the index metrics,
        a search's passages), run again on a fresh connection if the server restarts under it."""
        return fn(self, *args, **kwargs)
