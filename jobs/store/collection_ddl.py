"""Collection DDL and index builds: PgStore's share. A collection's row and its chunk table (the contract's
columns and the BM25 weights `lex`), the indexes on that table — the ones every commit reads (doc_id,
text_sha256), the ones a bulk load defers and builds once at its end (md5(embed_text), the metadata GIN),
the vectors' HNSW and BM25's text indexes — the one-time lexical upgrade of an older table, and the
document vectors derived from the chunks. These are a write command's steps (DDL); a search never calls
them. How an index is built (workers, memory) is jobs/store/index_build.py's job; what the HNSW index is
built over, jobs/store/index_kinds.py's.

A mixin, as jobs/store/runs.py is: it needs the store's connection (`self.conn`), its url and schema,
schema-qualified names (`self._t`), the collection lock's key (`self._lock_key`), the chunks view
(`self._refresh_view`), the embedding spaces' record (`self._record_space`) and the pivot cache
(`self._pivots`).
"""

from __future__ import annotations

import logging

from psycopg import sql

from jobs.store import doc_vectors, index_build, index_kinds, lexical, shared_text
from jobs.store import lexical_upgrade as upgrades
from jobs.store.arrow_copy import CHUNK_COLUMNS
from jobs.store.chunk_view import SQL_TYPES as _SQL_TYPES
from jobs.store.connection import reconnecting
from jobs.store.names import chunk_table_name, index_name
from jobs.store.spaces import Collection, CollectionMismatch
from jobs.terms import DIMENSION

log = logging.getLogger(__name__)

# A chunk row (texts, a vector, terms and weights: ~4 KB) is stored whole in its heap row, uncompressed:
# past PostgreSQL's 2 KB default the server compresses the texts with pglz and moves the vector and the
# weights into the TOAST table, one more insert each, all inside the one server every writer waits on;
# an HNSW build and an exact scan then read them back from there. The table is larger for it (the texts
# uncompressed); a row over this target (a very long chunk) is still toasted.
INLINE_TARGET = 8160  # toast_tuple_target's largest value

DEFAULT_INDEX_MEMORY_MB = 4096  # the config's database.index_memory_mb


class CollectionDDL:
    @reconnecting
    def get_collection(self, name: str) -> Collection | None:
        row = self.conn.execute(
            sql.SQL("SELECT name, embedding_model, dimension, chunk_table FROM {} WHERE name = %s")
            .format(self._t("collections")), (name,)).fetchone()
        return Collection(*row) if row else None

    @reconnecting
    def list_collections(self) -> list[Collection]:
        rows = self.conn.execute(sql.SQL(
            "SELECT name, embedding_model, dimension, chunk_table FROM {} ORDER BY name").format(self._t("collections")))
        return [Collection(*r) for r in rows]

    @reconnecting
    def ensure_collection(self, name: str, model: str, dimension: int,
                          whose: str = "this config embeds with") -> Collection:
        """The collection `name` (made if new) of `model`'s vectors; one of another model is refused, the
        message naming the model as `whose` (`the runs loaded hold`: a load's)."""
        existing = self.get_collection(name)
        if existing:
            if (existing.embedding_model, existing.dimension) != (model, dimension):
                raise CollectionMismatch(
                    f"collection {name!r} holds {existing.embedding_model} vectors (dimension {existing.dimension}), "
                    f"but {whose} {model} (dimension {dimension}); use another --collection, "
                    "or `corpusmill reembed` to build a new embedding space"
                )
            self._ensure_doc_index(existing.chunk_table)
            self._ensure_hash_index(existing.chunk_table)
            self._ensure_unread_indexes(existing.chunk_table)  # also after a bulk load that stopped first
            self._ensure_inline_rows(existing.chunk_table)
            self.upgrade_lexical(existing)
            return existing
        coll = Collection(name, model, dimension, chunk_table_name(name, model, dimension))
        with self.conn.transaction():
            # Two first runs of one collection at once: the second waits here, then finds it made.
            self.conn.execute("SELECT pg_advisory_xact_lock(%s)", (self._lock_key("create:" + name),))
            if self.get_collection(name) is not None:
                return self.ensure_collection(name, model, dimension)
            self._create_chunk_table(coll.chunk_table, dimension)
            self.conn.execute(sql.SQL(
                "INSERT INTO {} (name, embedding_model, dimension, chunk_table) VALUES (%s, %s, %s, %s) "
                "ON CONFLICT (name) DO NOTHING").format(self._t("collections")),
                (coll.name, coll.embedding_model, coll.dimension, coll.chunk_table))
            self._record_space(coll, "active")
            self._refresh_view()
        return self.get_collection(name)

    def _ensure_inline_rows(self, table: str) -> None:
        """A table from before INLINE_TARGET gets it for the rows written from now on (a setting, no rewrite;
        its lock lets reads and writes go on)."""
        options = self.conn.execute("SELECT reloptions FROM pg_class WHERE oid = to_regclass(%s)",
                                    (self._t(table).as_string(self.conn),)).fetchone()
        if options is not None and f"toast_tuple_target={INLINE_TARGET}" not in (options[0] or []):
            with self.conn.transaction():
                self.conn.execute(sql.SQL("ALTER TABLE {} SET (toast_tuple_target = {})").format(
                    self._t(table), sql.Literal(INLINE_TARGET)))

    def _create_chunk_table(self, table: str, dimension: int) -> None:
        """The contract's columns and `lex`, the BM25 weights the writers compute (jobs/store/lexical.py):
        plain columns only, so nothing is computed per row inside the server as rows arrive."""
        if self.conn.execute("SELECT to_regclass(%s)", (self._t(table).as_string(self.conn),)).fetchone()[0]:
            return
        defs = []
        for name, typ in CHUNK_COLUMNS:
            pg_type = sql.SQL("vector({})").format(sql.Literal(dimension)) if typ == "vector" else sql.SQL(
                _SQL_TYPES.get(typ, typ))
            extra = sql.SQL(" PRIMARY KEY") if name == "chunk_id" else sql.SQL("")
            defs.append(sql.SQL("{} {}{}").format(sql.Identifier(name), pg_type, extra))
        defs.append(sql.SQL("lex sparsevec({})").format(sql.Literal(DIMENSION)))
        self.conn.execute(sql.SQL("CREATE TABLE {} ({}) WITH (toast_tuple_target = {})").format(
            self._t(table), sql.SQL(", ").join(defs), sql.Literal(INLINE_TARGET)))
        lexical.forget_pivot(self.conn, self.schema, table)  # a table of this name dropped earlier had its own
        self._pivots.pop(table, None)
        lexical.install_triggers(self.conn, self.schema, table)
        self._ensure_doc_index(table)
        self._ensure_hash_index(table)
        self._ensure_unread_indexes(table)

    @reconnecting
    def upgrade_lexical(self, coll: Collection) -> bool:
        """Bring a chunk table from before text analysis left the database, or with an earlier analyser's
        terms, to today's shape (jobs/store/lexical_upgrade.py): a write command's step, never a
        search's. True when it ran."""
        if not upgrades.needed(self.conn, self.schema, coll.chunk_table):
            return False
        log.info("collection %s: analysing its chunks' terms outside the database (a one-time upgrade of %s)",
                 coll.name, coll.chunk_table)
        upgrades.upgrade(self.conn, self.schema, coll.chunk_table)
        self._pivots.pop(coll.chunk_table, None)  # set anew from the analysed rows
        return True

    @reconnecting
    def lexical_ready(self, coll: Collection) -> bool:
        """Whether every row of the collection's table has terms, which text search needs (False: its next
        ingest or load upgrades it). Terms of an earlier analyser still answer until then."""
        return upgrades.searchable(self.conn, self.schema, coll.chunk_table)

    # Indexes no commit reads: vector reuse's md5(embed_text) (an ingest looks texts up before it embeds,
    # not while it commits) and the metadata filters' GIN. A load into an empty table drops them and
    # builds each once at the end (defer_indexes, ensure_indexes) instead of maintaining them row by row.
    def _deferred_indexes(self, table: str) -> list[tuple[str, sql.Composable]]:
        # md5(embed_text): the texts vector reuse looks up (jobs/store/known_vectors.py).
        return [(index_name(table, "embed"), sql.SQL("(md5(embed_text))")),
                # Metadata filters compile to containment tests (jobs/search/filters.py), which this serves.
                (index_name(table, "metadata"), sql.SQL("USING gin (metadata jsonb_path_ops)"))]

    @reconnecting
    def defer_indexes(self, coll: Collection) -> bool:
        """Before a bulk load: drop the indexes no commit reads if the collection's table is empty (on rows
        already there a rebuild would cost more than it saves). True when they were dropped;
        ensure_indexes builds them again, and so does the next command's ensure_collection if the load stops."""
        if self.conn.execute(sql.SQL("SELECT EXISTS (SELECT 1 FROM {})").format(self._t(coll.chunk_table))).fetchone()[0]:
            return False
        for name, _ in self._deferred_indexes(coll.chunk_table):
            self.conn.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(sql.Identifier(self.schema, name)))
        return True

    def _ensure_unread_indexes(self, table: str, parallel: bool = False) -> None:
        """The indexes no commit reads, each made by name (IF NOT EXISTS): md5(embed_text) is an expression
        index, not found by column. `parallel`: with the server's parallel workers (after a bulk load)."""
        for name, how in self._deferred_indexes(table):
            with self.conn.transaction():
                if parallel:
                    index_build.use_workers(self.conn, self.url)
                self.conn.execute(sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} {}").format(
                    sql.Identifier(name), self._t(table), how))

    def _ensure_hash_index(self, table: str) -> None:
        """The text_sha256 index that finds which document holds a text (jobs/store/shared_text.py)."""
        if self.table_index(table, "btree", "text_sha256") is None:
            shared_text.ensure_hash_index(self.conn, self._t(table), sql.Identifier(index_name(table, "text")))

    def _ensure_doc_index(self, table: str) -> None:
        """The doc_id index every commit's DELETE needs. Also repairs a table from before index names were
        bounded, whose over-long index name PostgreSQL truncated to the table's own, so it was never made.
        Looked up by what it indexes, not by name: an older table's index under a truncated name counts."""
        if self.table_index(table, "btree", "doc_id") is None:
            self.conn.execute(sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} (doc_id)").format(
                sql.Identifier(index_name(table, "doc")), self._t(table)))

    @reconnecting
    def table_index(self, table: str, method: str, column: str) -> str | None:
        """The name of an index on `table` that uses `method` and leads with `column`, if there is one."""
        row = self.conn.execute(
            "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "JOIN pg_class t ON t.oid = i.indrelid JOIN pg_namespace n ON n.oid = t.relnamespace "
            "JOIN pg_am am ON am.oid = c.relam JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = i.indkey[0] "
            "WHERE n.nspname = %s AND t.relname = %s AND am.amname = %s AND a.attname = %s ORDER BY c.relname LIMIT 1",
            (self.schema, table, method, column)).fetchone()
        return row[0] if row else None

    def ensure_indexes(self, coll: Collection, db) -> bool:
        """Every search index of the collection's table after a load (`db`: the config's database
        section). True when the vectors' HNSW index was built now."""
        self._ensure_unread_indexes(coll.chunk_table, parallel=True)  # after defer_indexes
        self.ensure_text_index(coll, db.hnsw_m, db.hnsw_ef_construction, db.index_memory_mb, after_load=True)
        return self.ensure_hnsw_index(coll, db.hnsw_m, db.hnsw_ef_construction, db.index_memory_mb, db.vector_index)

    @reconnecting
    def ensure_hnsw_index(self, coll: Collection, m: int = 16, ef_construction: int = 64,
                          memory_mb: int = DEFAULT_INDEX_MEMORY_MB, kind: str = "vector") -> bool:
        """Build the cosine HNSW index (of `kind`: jobs/store/index_kinds.py) once the first bulk load is
        in (building it after the load is far cheaper than maintaining it row by row). A table that has
        one keeps it, whatever its kind. Returns True when it was built now."""
        if self.hnsw_kind(coll) is not None or self.table_index(coll.chunk_table, "hnsw", "embedding"):
            return False
        n = self.conn.execute(sql.SQL("SELECT count(*) FROM {}").format(self._t(coll.chunk_table))).fetchone()[0]
        if n == 0:
            return False
        index_build.build_hnsw(self.conn, self.url, self._t(coll.chunk_table), index_name(coll.chunk_table, "hnsw"),
                               index_kinds.key(kind, coll.dimension), n, index_kinds.value_bytes(kind, coll.dimension),
                               m, ef_construction, memory_mb, f"collection {coll.name}")
        self.conn.execute(sql.SQL("ANALYZE {}").format(self._t(coll.chunk_table)))
        return True

    @reconnecting
    def hnsw_kind(self, coll: Collection) -> str | None:
        """`vector`, `halfvec` or `binary`: what the table's HNSW index is built over (None: no index yet)."""
        return index_kinds.kind_of(self.conn, self.schema, index_name(coll.chunk_table, "hnsw"))

    @reconnecting
    def ensure_doc_vectors(self, coll: Collection, encode) -> int:
        """Build or update the collection's document vectors (jobs/store/doc_vectors.py) with `encode`,
        which must embed as the space's model does; returns how many were embedded now."""
        return doc_vectors.ensure(self.conn, self.schema, coll.chunk_table, coll.dimension, encode)

    @reconnecting
    def ensure_text_index(self, coll: Collection, m: int = 16, ef_construction: int = 64,
                          memory_mb: int = DEFAULT_INDEX_MEMORY_MB, after_load: bool = False) -> bool:
        """BM25's indexes (jobs/store/lexical.py): the GIN index over `lex_terms` and the HNSW index over
        the weights `lex`, built once the first load is in, like the vectors' HNSW, and before it; the
        totals' triggers where a table lacks them. `after_load` (a load's own call, ensure_indexes): the
        totals are folded into one row. A write command's step (DDL): a search never calls it. True when
        an index was built now."""
        self.upgrade_lexical(coll)
        return upgrades.ensure_indexes(self.conn, self.url, self.schema, coll.chunk_table, self.table_index,
                                       (m, ef_construction, memory_mb), after_load, f"collection {coll.name}")
