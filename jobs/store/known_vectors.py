"""Vectors the database already holds, looked up by embedded text, so an ingest embeds only texts it has
not embedded before (#20): the unchanged chunks of an edited document, a block repeated across pages,
every chunk after a config change that leaves `embed_text` as it was, and (`embedding.reuse_other_collections`)
texts another collection embedded with the same model, such as a corpus ingested again under a new name.

The key is the text itself, found through each chunk table's index on md5(embed_text) and then compared
whole, so a hash collision can never hand a chunk another text's vector. The model is the tables': a
chunk table holds one embedding model's vectors, an ingest whose model differs from the collection's is
refused before it starts, and other collections' tables are chosen by the exact model reference (backend
and quantization included) and dimension (jobs/store/spaces.py `tables_embedded_with`). A lookup that
fails (the server away, a table dropped meanwhile) costs only the reuse: those texts are embedded as if
none were known, and the run goes on.
"""

from __future__ import annotations

import hashlib
import logging

import psycopg
from psycopg import sql

from jobs.store.connection import connect

log = logging.getLogger(__name__)

LOOKUP_ROWS = 1000  # texts per query: a few hundred KB of parameters at most


def embed_key(text: str) -> str:
    """What the index holds for a text: PostgreSQL's md5() of its UTF-8 bytes."""
    return hashlib.md5(text.encode("utf-8", "surrogatepass")).hexdigest()


class KnownVectors:
    """Looks texts up in chunk tables, in order (the collection's own first), each asked only for what the
    ones before it lacked. Picklable: each embedding actor opens its own connection on first use (named
    `corpusmill reuse` in pg_stat_activity)."""

    def __init__(self, url: str, schema: str, tables: str | list[str]):
        self.url, self.schema = url, schema
        self.tables = [tables] if isinstance(tables, str) else list(dict.fromkeys(tables))
        self._conn: psycopg.Connection | None = None

    def __getstate__(self) -> dict:
        return {"url": self.url, "schema": self.schema, "tables": self.tables, "_conn": None}

    def lookup(self, texts: list[str]) -> dict[str, list[float]]:
        """The vectors the tables hold for any of `texts`, by text."""
        missing = list(dict.fromkeys(texts))
        found: dict[str, list[float]] = {}
        for table in list(self.tables):
            if not missing:
                break
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = connect(self.url, "corpusmill reuse")
                query = sql.SQL("SELECT DISTINCT ON (embed_text) embed_text, embedding::real[] FROM {} "
                                "WHERE md5(embed_text) = ANY(%s) AND embed_text = ANY(%s)").format(
                    sql.Identifier(self.schema, table))
                for i in range(0, len(missing), LOOKUP_ROWS):
                    part = missing[i:i + LOOKUP_ROWS]
                    found.update(self._conn.execute(query, ([embed_key(t) for t in part], part)).fetchall())
            except psycopg.errors.UndefinedTable:
                # Another collection's space dropped since the run began (`reembed --drop-old`): not asked again.
                log.info("vector reuse: %s is gone; its vectors are no longer looked up", table)
                self.tables.remove(table)
                continue  # autocommit: the connection is still good
            except (psycopg.Error, UnicodeError) as exc:
                log.warning("vector reuse skipped for %d texts (%s: %s); they are embedded", len(missing),
                            type(exc).__name__, str(exc).strip().splitlines()[0] if str(exc).strip() else "")
                self.close()
                return found
            missing = [t for t in missing if t not in found]
        return found

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None


def vectors_to_reuse(store, url: str, schema: str, embedding, model: str, dimension: int, own: str | None = None,
                     building: str | None = None) -> KnownVectors | None:
    """Where an embedding stage looks texts up, per `embedding.reuse` and `reuse_other_collections`: the
    `own` chunk table first, then other collections' tables of `model` (not the space `building`, which
    holds only what this job wrote). None when reuse is off or there is nowhere to look."""
    if not embedding.reuse:
        return None
    tables = [own] if own else []
    if embedding.reuse_other_collections:
        tables += [t for t in store.tables_embedded_with(model, dimension) if t != building]
    return KnownVectors(url, schema, tables) if tables else None
