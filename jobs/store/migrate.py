"""Schema and migrations: PgStore's share. `migrate` applies jobs/store/migrations/NNN_*.sql not yet
applied (the write side: ingest, load, reembed, `corpusmill upgrade`), and `check_schema` is what the read
side does instead (jobs/store/schema.py: it writes nothing); both leave the connection reading vectors as
numpy arrays, and a migration run refreshes the chunks view (jobs/store/chunk_view.py).

A mixin, as jobs/store/runs.py is: it needs the store's connection (`self.conn`), its schema (`self.schema`)
and schema-qualified names (`self._t`), and `self._vector_ready`, which a reconnect resets.
"""

from __future__ import annotations

import psycopg
from pgvector.psycopg import register_vector
from psycopg import sql

from jobs.errors import NotPermittedError
from jobs.store import schema as schema_
from jobs.store.chunk_view import refresh as refresh_chunk_view
from jobs.store.schema import MIGRATIONS_DIR


class Migrations:
    def migrate(self) -> list[str]:
        """Apply jobs/store/migrations/NNN_*.sql not yet applied, all in one transaction under a transaction-level
        advisory lock: concurrent first runs apply them once, one run after the other, and a migration that
        fails rolls back every one of this call, so the schema is as it was before."""
        if not MIGRATIONS_DIR.is_dir():
            raise FileNotFoundError(f"SQL migrations not found at {MIGRATIONS_DIR}")
        applied_now = []
        with self.conn.transaction():
            # Serialise concurrent first runs (two ingests on a fresh database).
            self.conn.execute("SELECT pg_advisory_xact_lock(hashtext('corpusmill-migrate'))")
            try:
                self.conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            except psycopg.errors.InsufficientPrivilege as exc:
                raise NotPermittedError(
                    "the pgvector extension is not installed in this database and this user may not create "
                    "it: ask an administrator to run `CREATE EXTENSION vector`"
                ) from exc
            self.conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.schema)))
            self.conn.execute(sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} (version text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
            ).format(self._t("schema_migrations")))
            done = {r[0] for r in self.conn.execute(sql.SQL("SELECT version FROM {}").format(self._t("schema_migrations")))}
            for path in sorted(MIGRATIONS_DIR.glob("[0-9][0-9][0-9]_*.sql")):
                version = path.stem
                if version in done:
                    continue
                self.conn.execute(sql.SQL("SET LOCAL search_path TO {}, public").format(sql.Identifier(self.schema)))
                self.conn.execute(path.read_text(encoding="utf-8"))
                self.conn.execute(sql.SQL("INSERT INTO {} (version) VALUES (%s)").format(self._t("schema_migrations")),
                                  (version,))
                applied_now.append(version)
            self._refresh_view()
        self._register_vector()
        return applied_now

    def check_schema(self, then: str = "search again") -> None:
        """What a read does instead of migrate(): raise unless the schema is current (jobs/store/schema.py;
        `then`: what its message tells a user to do after the upgrade), and read vectors as numpy arrays.
        Writes nothing, so a role that may only read can search."""
        schema_.check(self.conn, self.schema, then)
        self._register_vector()

    def _register_vector(self) -> None:
        if not self._vector_ready:
            register_vector(self.conn)
            self._vector_ready = True

    def _refresh_view(self) -> None:
        refresh_chunk_view(self.conn, self.schema)
