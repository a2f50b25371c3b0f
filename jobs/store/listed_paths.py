"""The paths a plan listed, kept in the database instead of the driver's memory.

A plan needs every listed path once, at its end: what the store holds beyond them left the input and
is deleted. A set of a million paths is ~100 MB in Python; a temporary table on a connection of its
own costs the driver nothing and finds them by one anti-join. The connection is this object's alone
and never reconnects: a server lost mid-plan takes the table with it, so the plan fails instead of
planning deletions from half a listing.
"""

from __future__ import annotations

from psycopg import sql

from jobs.store.connection import connect


class ListedPaths:
    def __init__(self, url: str, schema: str, application_name: str = "corpusmill plan"):
        self.url, self.schema, self.application_name = url, schema, application_name
        self.conn = None

    def __enter__(self) -> ListedPaths:
        self.conn = connect(self.url, self.application_name)
        self.conn.execute("CREATE TEMPORARY TABLE listed_paths (source_path text PRIMARY KEY)")
        return self

    def __exit__(self, *exc) -> None:
        self.conn.close()  # the temporary table goes with the session

    def add(self, paths: list[str]) -> None:
        with self.conn.cursor() as cur, cur.copy("COPY pg_temp.listed_paths (source_path) FROM STDIN") as copy:
            for path in paths:
                copy.write_row((path,))

    def not_listed(self, collection: str) -> list[str]:
        """The collection's stored documents whose path was not listed, sorted."""
        rows = self.conn.execute(sql.SQL(
            "SELECT d.source_path FROM {} d WHERE d.collection = %s AND NOT EXISTS "
            "(SELECT 1 FROM pg_temp.listed_paths l WHERE l.source_path = d.source_path) ORDER BY 1").format(
            sql.Identifier(self.schema, "documents")), (collection,))
        return [r[0] for r in rows]
