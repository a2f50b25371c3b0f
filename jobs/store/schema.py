"""Whether the database holds the schema this corpusmill reads, asked without changing anything.

Only the write side changes the schema: `ingest`, `load`, `reembed` and `corpusmill upgrade` run the
migrations (PgStore.migrate). The read side (`search`, `serve`, `status`, `eval`, `report` and the API's
Collection) checks here instead, so that a role that may only read (USAGE and SELECT on the schema) can
search, and a search never takes the locks a migration takes. A schema that is missing or behind gets
a one-line message naming the command that brings it up to date.
"""

from __future__ import annotations

from pathlib import Path

from psycopg import sql

from jobs.errors import NotFoundError, UserError

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
UPGRADE = "corpusmill upgrade"


class SchemaMissing(NotFoundError):
    """No corpusmill tables in the database's schema yet: nothing has been ingested there."""


class SchemaOutdated(UserError):
    """The database's schema lacks migrations this corpusmill reads: `corpusmill upgrade` applies them."""


def wanted_versions() -> list[str]:
    """The migrations this corpusmill ships (jobs/store/migrations/NNN_*.sql), oldest first."""
    return sorted(p.stem for p in MIGRATIONS_DIR.glob("[0-9][0-9][0-9]_*.sql"))


def applied_versions(conn, schema: str) -> set[str] | None:
    """The migrations recorded in `schema`; None when it has no schema_migrations table (or this role may
    not see it)."""
    name = conn.execute("SELECT to_regclass(format('%%I.%%I', %s::text, 'schema_migrations'))", (schema,)).fetchone()[0]
    if name is None:
        return None
    return {r[0] for r in conn.execute(sql.SQL("SELECT version FROM {}").format(
        sql.Identifier(schema, "schema_migrations")))}


def check(conn, schema: str, then: str = "search again") -> None:
    """Raise SchemaMissing or SchemaOutdated unless `schema` holds every migration this corpusmill ships.
    Reads two catalog rows; writes nothing."""
    applied = applied_versions(conn, schema)
    if applied is None:
        raise SchemaMissing(f"no corpusmill tables in schema {schema!r} of this database (or this role may not "
                            "read them): run `corpusmill ingest` first, or check --database-url and the "
                            "config's database.schema")
    missing = [v for v in wanted_versions() if v not in applied]
    if missing:
        raise SchemaOutdated(f"the database's schema {schema!r} predates this corpusmill ({len(missing)} "
                             f"migration(s) to apply, from {missing[0]}): run `{UPGRADE}` (or any ingest) as "
                             f"a role that may change the schema, then {then}")


def table_exists(conn, schema: str, table: str) -> bool:
    return conn.execute("SELECT to_regclass(format('%%I.%%I', %s::text, %s::text)) IS NOT NULL",
                        (schema, table)).fetchone()[0]
