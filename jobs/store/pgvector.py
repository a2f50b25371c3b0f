"""PostgreSQL + pgvector: schema, per-document atomic loads (the checkpoint), runs, errors, search.

Guarantee: `commit_document` replaces one document's chunks and marks its documents row `done` in a
single transaction. A crash at any moment leaves each document either fully old or fully new, and
the documents table says which; a rerun therefore resumes exactly, and a retried write replaces
rather than duplicates (chunk_id is the primary key and the old rows are deleted first).

Identifiers that come from config (schema, collection → table names) go through sql.Identifier.
Their names come from jobs.store.names, connection faults are handled in jobs.store.connection, and the
per-collection write lock lives in jobs.store.locks.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import psycopg
import pyarrow as pa
from pgvector.psycopg import register_vector
from psycopg import sql

from jobs.errors import NotPermittedError, UnreachableError
from jobs.rows import storable
from jobs.sources.changes import StoredDoc
from jobs.store import arrow_copy, doc_vectors, hits, index_build, lexical, locks, shared_text, text_search, vector_index
from jobs.store import filters as filters_
from jobs.store import lexical_upgrade as upgrades
from jobs.store import schema as schema_
from jobs.store.arrow_copy import CHUNK_COLUMNS
from jobs.store.chunk_view import SQL_TYPES as _SQL_TYPES
from jobs.store.chunk_view import VIEW_COLUMNS  # noqa: F401 (part of this module's API)
from jobs.store.chunk_view import refresh as refresh_chunk_view
from jobs.store.connection import connect, connect_with_backoff, reconnecting
from jobs.store.names import chunk_table_name, index_name, lock_key
from jobs.store.runs import RunRecords, UnknownCollection  # noqa: F401 (part of this module's API)
from jobs.store.spaces import Collection, CollectionMismatch, EmbeddingSpaces
from jobs.terms import DIMENSION

log = logging.getLogger(__name__)

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"

DEFAULT_INDEX_MEMORY_MB = 4096  # the config's database.index_memory_mb



@dataclass(frozen=True)
class Committed:
    """What one document's commit stored: vectors, copies of text another document holds (not stored
    again; jobs/store/shared_text.py), and other documents marked pending because a text only this one
    held is gone."""
    vectors: int
    shared: int = 0
    released: int = 0


# A planned document becomes pending under its run with the listing it was planned with; its old chunks
# stay until its commit replaces them.
_PENDING_CONFLICT = ("ON CONFLICT (collection, source_path) DO UPDATE SET status = 'pending', run_id = EXCLUDED.run_id, "
                     "source_size = EXCLUDED.source_size, source_etag = EXCLUDED.source_etag, updated_at = now()")


class PgStore(RunRecords, EmbeddingSpaces):
    def __init__(self, url: str, schema: str = "corpusmill", *, application_name: str = "corpusmill",
                 reconnect_seconds: float = 60.0):
        self.url, self.schema, self.application_name = url, schema, application_name
        self.reconnect_seconds = reconnect_seconds
        self._vector_ready = False
        self._locks: dict[str, int] = {}  # collection -> advisory lock key held by this session
        self.owner_tokens: dict[str, str] = {}  # collection -> this run's owner token (locks.take_lease)
        self._depth = 0  # store calls in progress (only the outermost replays after a reconnect)
        self._pivots: dict[str, float] = {}  # chunk table -> its BM25 pivot, once set (jobs/store/lexical.py)
        try:
            self.conn = self._connect()
        except psycopg.OperationalError as exc:
            raise UnreachableError(
                f"cannot connect to PostgreSQL ({exc}); check --database-url / DATABASE_URL, "
                "or unset them to use the embedded server (`corpusmill db start`)"
            ) from exc

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

    # ---- one writer per collection ------------------------------------------------------------
    def _lock_key(self, collection: str) -> int:
        return lock_key(self.schema, collection)

    @reconnecting
    def lock_collection(self, collection: str, holder: str, wait_seconds: float = 0.0) -> None:
        """Take the collection's write lock (a session advisory lock, released when this store closes or
        its connection dies) so two ingests — from two shells or two machines — never interleave commits.
        Held by another run: wait up to `wait_seconds`, then raise CollectionBusy naming that run."""
        key = self._lock_key(collection)
        self.conn.execute("SELECT set_config('application_name', %s, false)", (holder[:63],))
        self.application_name = holder  # a reconnect presents itself the same way
        locks.wait_for_lock(self.conn, key, collection, wait_seconds)
        self._locks[collection] = key
        self.owner_tokens[collection] = locks.take_lease(self.conn, self.schema, collection, holder)
        # Rows an earlier run staged (jobs/store/writers.py) are only ever assembled under that run's id, so a
        # killed run's would stay for good; under the lock no other run of the collection is staging.
        self.conn.execute(sql.SQL("DELETE FROM {} WHERE collection = %s").format(self._t("staged_rows")), (collection,))

    def owner_token(self, collection: str) -> str | None:
        """This run's owner token of `collection` (lock_collection made it): what its writers commit under."""
        return self.owner_tokens.get(collection)

    def unlock_collection(self, collection: str) -> None:
        key = self._locks.pop(collection, None)
        if key is not None and not self.connection_lost():
            locks.unlock(self.conn, key)

    def lock_holder(self, collection: str) -> str:
        """Who holds the collection's lock, in words: the holder's application_name (`corpusmill ingest
        <run_id>`), its client address and since when."""
        return locks.holder(self.conn, self._lock_key(collection))

    def _t(self, name: str) -> sql.Composed:
        return sql.Identifier(self.schema, name)

    # ---- schema -------------------------------------------------------------------------------
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

    def check_schema(self) -> None:
        """What a read does instead of migrate(): raise unless the schema is current (jobs/store/schema.py),
        and read vectors as numpy arrays. Writes nothing, so a role that may only read can search."""
        schema_.check(self.conn, self.schema)
        self._register_vector()

    def _register_vector(self) -> None:
        if not self._vector_ready:
            register_vector(self.conn)
            self._vector_ready = True

    def _refresh_view(self) -> None:
        refresh_chunk_view(self.conn, self.schema)

    # ---- collections --------------------------------------------------------------------------
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
    def ensure_collection(self, name: str, model: str, dimension: int) -> Collection:
        existing = self.get_collection(name)
        if existing:
            if (existing.embedding_model, existing.dimension) != (model, dimension):
                raise CollectionMismatch(
                    f"collection {name!r} holds {existing.embedding_model} vectors (dimension {existing.dimension}), "
                    f"but this config embeds with {model} (dimension {dimension}); use another --collection, "
                    "or `corpusmill reembed` to build a new embedding space"
                )
            self._ensure_doc_index(existing.chunk_table)
            self._ensure_hash_index(existing.chunk_table)
            self._ensure_embed_index(existing.chunk_table)
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
        self.conn.execute(sql.SQL("CREATE TABLE {} ({})").format(self._t(table), sql.SQL(", ").join(defs)))
        lexical.forget_pivot(self.conn, self.schema, table)  # a table of this name dropped earlier had its own
        self._pivots.pop(table, None)
        lexical.install_triggers(self.conn, self.schema, table)
        # Metadata filters compile to containment tests (jobs/store/filters.py), which this index serves.
        self.conn.execute(sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} USING gin (metadata jsonb_path_ops)").format(
            sql.Identifier(index_name(table, "metadata")), self._t(table)))
        self._ensure_doc_index(table)
        self._ensure_hash_index(table)
        self._ensure_embed_index(table)

    @reconnecting
    def upgrade_lexical(self, coll: Collection) -> bool:
        """Bring a chunk table from before text analysis left the database to today's shape
        (jobs/store/lexical_upgrade.py): a write command's step, never a search's. True when it ran."""
        if not upgrades.needed(self.conn, self.schema, coll.chunk_table):
            return False
        log.info("collection %s: analysing its chunks' terms outside the database (a one-time upgrade of %s)",
                 coll.name, coll.chunk_table)
        upgrades.upgrade(self.conn, self.schema, coll.chunk_table)
        return True

    @reconnecting
    def lexical_ready(self, coll: Collection) -> bool:
        """Whether the collection's table has today's lexical columns (False: its next ingest or load
        upgrades it; text search needs them)."""
        return not upgrades.needed(self.conn, self.schema, coll.chunk_table)

    def _pivot(self, table: str, rows: pa.Table) -> float:
        """The table's BM25 pivot: set by its first commit from `rows`' mean length, fixed after (cached)."""
        found = self._pivots.get(table)
        if found is None:
            found = lexical.pivot(self.conn, self.schema, table)
            if found is None:  # not remembered: the commit that sets it may yet roll back
                return lexical.settle_pivot(self.conn, self.schema, table, lexical.mean_length(rows))
            self._pivots[table] = found
        return found

    def _ensure_embed_index(self, table: str) -> None:
        """The md5(embed_text) index vector reuse looks texts up by (jobs/store/known_vectors.py); an
        expression index, so it is made by name (IF NOT EXISTS), not found by column."""
        self.conn.execute(sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} (md5(embed_text))").format(
            sql.Identifier(index_name(table, "embed")), self._t(table)))

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
        self.ensure_text_index(coll, db.hnsw_m, db.hnsw_ef_construction, db.index_memory_mb, after_load=True)
        return self.ensure_hnsw_index(coll, db.hnsw_m, db.hnsw_ef_construction, db.index_memory_mb, db.vector_index)

    @reconnecting
    def ensure_hnsw_index(self, coll: Collection, m: int = 16, ef_construction: int = 64,
                          memory_mb: int = DEFAULT_INDEX_MEMORY_MB, kind: str = "vector") -> bool:
        """Build the cosine HNSW index (of `kind`: jobs/store/vector_index.py) once the first bulk load is
        in (building it after the load is far cheaper than maintaining it row by row). A table that has
        one keeps it, whatever its kind. Returns True when it was built now."""
        if self.vector_index_kind(coll) is not None or self.table_index(coll.chunk_table, "hnsw", "embedding"):
            return False
        n = self.conn.execute(sql.SQL("SELECT count(*) FROM {}").format(self._t(coll.chunk_table))).fetchone()[0]
        if n == 0:
            return False
        index_build.build_hnsw(self.conn, self.url, self._t(coll.chunk_table), index_name(coll.chunk_table, "hnsw"),
                               vector_index.key(kind, coll.dimension), n, vector_index.value_bytes(kind, coll.dimension),
                               m, ef_construction, memory_mb, f"collection {coll.name}")
        self.conn.execute(sql.SQL("ANALYZE {}").format(self._t(coll.chunk_table)))
        return True

    @reconnecting
    def vector_index_kind(self, coll: Collection) -> str | None:
        """`vector`, `halfvec` or `binary`: what the table's HNSW index is built over (None: no index yet)."""
        return vector_index.kind_of(self.conn, self.schema, index_name(coll.chunk_table, "hnsw"))

    # ---- documents: plan and checkpoint -------------------------------------------------------
    @reconnecting
    def stored_documents(self, collection: str, paths: list[str] | None = None) -> dict[str, StoredDoc]:
        """The collection's documents by source path; only those of `paths` when given (a plan's page)."""
        rows = self.conn.execute(sql.SQL(
            "SELECT source_path, content_sha256, pipeline_fingerprint, status, source_size, source_etag, "
            "failed_sha256, failed_fingerprint FROM {} "
            "WHERE collection = %s" + (" AND source_path = ANY(%s)" if paths is not None else "")).format(
            self._t("documents")), (collection, paths) if paths is not None else (collection,))
        return {r[0]: StoredDoc(*r) for r in rows}

    @reconnecting
    def record_listing(self, collection: str, files: list[tuple[str, int, str | None]]) -> None:
        """(source_path, size, listing tag) of `done` documents found unchanged in content under a new
        listing (a re-upload, a touched file), or of `failed` ones found still holding the content they
        failed on: the next plan trusts them without reading them again."""
        if not files:
            return
        with self.conn.transaction(), self.conn.cursor() as cur:
            cur.executemany(sql.SQL(
                "UPDATE {} SET source_size = %s, source_etag = %s WHERE collection = %s AND source_path = %s "
                "AND (status = 'done' OR (status = 'failed' AND failed_sha256 IS NOT NULL))").format(self._t("documents")),
                [(size, tag, collection, path) for path, size, tag in files])

    @reconnecting
    def mark_pending(self, collection: str, run_id: str, docs: list[dict]) -> None:
        """Planned documents become `pending` (old chunks stay until each is replaced), with the listing
        their content comes with (`source_size`, `source_etag`), which their commit keeps: a pending
        row's listing is never trusted (jobs/sources/discover.py), a done one's is."""
        with self.conn.transaction(), self.conn.cursor() as cur:
            cur.executemany(sql.SQL(
                "INSERT INTO {} (collection, source_path, doc_id, source_type, status, run_id, source_size, source_etag) "
                "VALUES (%s, %s, %s, %s, 'pending', %s, %s, %s) " + _PENDING_CONFLICT).format(self._t("documents")),
                [(collection, d["source_path"], d["doc_id"], d["source_type"], run_id, d.get("source_size"),
                  d.get("source_etag")) for d in docs])

    @reconnecting
    def mark_pending_work(self, collection: str, run_id: str, since: int = 0) -> None:
        """mark_pending for the run's work items from sequence number `since` on (a round of them,
        jobs/store/work_items.py), in one statement: the driver never reads them back."""
        self.conn.execute(sql.SQL(
            "INSERT INTO {docs} (collection, source_path, doc_id, source_type, status, run_id, source_size, source_etag) "
            "SELECT collection, source_path, item->>'doc_id', source_type, 'pending', run_id, source_size, source_etag "
            "FROM {work} WHERE collection = %s AND run_id = %s AND seq >= %s " + _PENDING_CONFLICT).format(
            docs=self._t("documents"), work=self._t("work_items")), (collection, run_id, since))

    @reconnecting
    def released_documents(self, collection: str) -> list[str]:
        """Documents marked pending because a text they only copied lost its holder (shared_text.release:
        pending with no run), to be re-chunked so that one of them holds it."""
        return [r[0] for r in self.conn.execute(sql.SQL(
            "SELECT source_path FROM {} WHERE collection = %s AND status = 'pending' AND run_id IS NULL "
            "ORDER BY source_path").format(self._t("documents")), (collection,))]

    @reconnecting
    def commit_document(self, coll: Collection, doc: dict, chunks: list[dict], run_id: str,
                        share_text: bool = True) -> Committed:
        """Replace one document's chunks (row dicts) and mark it done, atomically: commit_documents for one."""
        loaded = [dict(c, doc_id=doc["doc_id"]) for c in chunks if not c.get("omitted")]
        return self.commit_documents(coll, [doc], arrow_copy.rows_table(loaded), run_id, share_text)

    @reconnecting
    def commit_documents(self, coll: Collection, docs: list[dict], chunks: pa.Table, run_id: str,
                         share_text: bool = True, keep_listing: bool = False, owner: str | None = None) -> Committed:
        """commit_document for many documents in one transaction, from Arrow (the parallel writers' path,
        jobs/store/writers.py): each of `docs` gets exactly the rows of `chunks` (embedded chunks, in
        the order of `docs`) with its doc_id, and its checkpoint row `done`. All of them or none commit.
        `owner`: the run's owner token; the commit happens only while it owns the collection (the fence,
        jobs/store/locks.py), else OwnershipLost."""
        self._register_vector()  # a writer's store never ran migrate()
        ids = [d["doc_id"] for d in docs]
        table, registry = self._t(coll.chunk_table), self._t("shared_text")
        with self.conn.transaction():
            if owner is not None:
                locks.check_lease(self.conn, self.schema, coll.name, owner)
            old: dict[str, set] = defaultdict(set)
            for doc, sha in self.conn.execute(sql.SQL(
                    "DELETE FROM {} WHERE doc_id = ANY(%s) RETURNING doc_id, text_sha256").format(table), (ids,)):
                old[doc].add(sha)
            of_doc, hashes = chunks.column("doc_id").to_pylist(), chunks.column("text_sha256").to_pylist()
            chunks = lexical.fill(chunks)  # rows from before the terms were part of the contract
            pivot = self._pivot(coll.chunk_table, chunks)

            def copy(conn, target, rows):
                return arrow_copy.copy_table(conn, target, rows, pivot)

            if share_text:  # the stored rows' COPY, then their texts' locks (shared_text.copy_stored)
                keep = shared_text.copy_stored(self.conn, table, chunks, set().union(*old.values()), copy)
            else:
                keep = [True] * chunks.num_rows
                copy(self.conn, table, chunks)
            ids_col = chunks.column("chunk_id").to_pylist()
            copies = [(d, c, h) for d, c, h, k in zip(of_doc, ids_col, hashes, keep) if not k]
            shared_text.replace_copies(self.conn, registry, coll.name, ids, copies)
            stored = sum(keep)
            new: dict[str, set] = defaultdict(set)
            for d, h, k in zip(of_doc, hashes, keep):
                if k:
                    new[d].add(h)
            released = len(shared_text.release(self.conn, table, registry, self._t("documents"), coll.name,
                                               set().union(*(hs - new[d] for d, hs in old.items()))))
            per_doc = Counter(d for d, k in zip(of_doc, keep) if k)
            self._set_documents(coll.name, [(doc, "done", per_doc[doc["doc_id"]], run_id, None) for doc in docs],
                                keep_listing)
        return Committed(stored, len(copies), released)

    @reconnecting
    def read(self, fn, *args, **kwargs):
        """`fn(self, *args, **kwargs)`, a read-only function over this store's connection (the index metrics),
        run again on a fresh connection if the server restarts under it."""
        return fn(self, *args, **kwargs)

    @reconnecting
    def shared_text_counts(self, coll: Collection) -> dict:
        return shared_text.counts(self.conn, self._t("shared_text"), self._t("documents"), coll.name)

    @reconnecting
    def record_failure(self, collection: str, doc: dict, run_id: str, stage: str, error_class: str,
                       message: str, retryable: bool = True, owner: str | None = None) -> None:
        """The document stays as it was (old chunks kept), flagged failed, and the error is logged. A failure
        that is not `retryable` was the content's own: the content (`doc`'s content_sha256) and pipeline it
        failed under are kept, and the plan leaves the document failed until either changes
        (jobs/sources/changes.py); a retryable one is retried by the next run."""
        settled = [None, None] if retryable else [doc.get("content_sha256"), doc.get("pipeline_fingerprint")]
        with self.conn.transaction():
            if owner is not None:  # the fence, as for a commit
                locks.check_lease(self.conn, self.schema, collection, owner)
            self.conn.execute(sql.SQL(
                "INSERT INTO {} (run_id, collection, source_path, stage, error_class, message, retryable, "
                "content_sha256, pipeline_fingerprint) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)").format(
                self._t("errors")),  # what it failed on: a document lost run after run settles (jobs/ingest.py)
                storable([run_id, collection, doc["source_path"], stage, error_class, message]) + [
                    retryable, doc.get("content_sha256"), doc.get("pipeline_fingerprint")])
            self.conn.execute(sql.SQL(
                "UPDATE {} SET status = 'failed', last_error = %s, run_id = %s, failed_sha256 = %s, "
                "failed_fingerprint = %s, updated_at = now() WHERE collection = %s AND source_path = %s").format(
                self._t("documents")),
                storable([f"[{stage}] {error_class}: {message}"[:2000], run_id, *settled, collection,
                          doc["source_path"]]))

    def _set_documents(self, collection: str, entries: list[tuple[dict, str, int, str, str | None]],
                       keep_listing: bool = False) -> None:
        """Checkpoint rows: (doc, status, chunk_count, run_id, error) each."""
        with self.conn.cursor() as cur:
            cur.executemany(sql.SQL(
                "INSERT INTO {} (collection, source_path, doc_id, source_type, content_sha256, pipeline_fingerprint, "
                "status, chunk_count, run_id, last_error, source_size, source_etag, updated_at) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, now()) "
                "ON CONFLICT (collection, source_path) DO UPDATE SET doc_id = EXCLUDED.doc_id, "
                "source_type = EXCLUDED.source_type, content_sha256 = EXCLUDED.content_sha256, "
                "pipeline_fingerprint = EXCLUDED.pipeline_fingerprint, status = EXCLUDED.status, "
                "chunk_count = EXCLUDED.chunk_count, run_id = EXCLUDED.run_id, last_error = EXCLUDED.last_error, "
                # The listing the content came with: the doc's own, else the one its pending row holds (an
                # ingest's, from mark_pending); a reload from Parquet has none (NULL: the next plan reads it).
                "source_size = CASE WHEN %s THEN {t}.source_size ELSE EXCLUDED.source_size END, "
                "source_etag = CASE WHEN %s THEN {t}.source_etag ELSE EXCLUDED.source_etag END, "
                "updated_at = now()").format(self._t("documents"), t=self._t("documents")),
                [storable([collection, doc["source_path"], doc["doc_id"], doc["source_type"], doc["content_sha256"],
                           doc["pipeline_fingerprint"], status]) + [chunk_count, run_id, storable(error),
                                                                    doc.get("source_size"), doc.get("source_etag")]
                 + [keep_listing and doc.get("source_size") is None] * 2
                 for doc, status, chunk_count, run_id, error in entries])

    @reconnecting
    def delete_document(self, coll: Collection, source_path: str, released: list[str] | None = None) -> int:
        """Remove a document that left the input: its chunks, its recorded copies and its checkpoint row,
        together. Returns the chunks removed; `released` gets the paths of documents marked pending
        because they only recorded a copy of a text this one held (jobs/store/shared_text.py)."""
        table, registry = self._t(coll.chunk_table), self._t("shared_text")
        with self.conn.transaction():
            row = self.conn.execute(sql.SQL(
                "DELETE FROM {} WHERE collection = %s AND source_path = %s RETURNING doc_id").format(
                self._t("documents")), (coll.name, source_path)).fetchone()
            if not row:
                return 0
            old = [r[0] for r in self.conn.execute(sql.SQL(
                "DELETE FROM {} WHERE doc_id = %s RETURNING text_sha256").format(table), (row[0],))]
            shared_text.record_copies(self.conn, registry, coll.name, row[0], [])
            paths = shared_text.release(self.conn, table, registry, self._t("documents"), coll.name, set(old))
            if released is not None:
                released += paths
            return len(old)

    # ---- reading ------------------------------------------------------------------------------
    def search(self, coll: Collection, vector, k: int, ef_search: int = 40, exact: bool = False) -> list[dict]:
        return self.search_many(coll, [vector], k, ef_search, exact)[0]

    @reconnecting
    def add_passages(self, coll: Collection, found: list[dict], query: str) -> list[dict]:
        """`found` (hits of search_many) with the passage of each that matched `query` (jobs/store/hits.py)."""
        return hits.add_passages(self.conn, self._t(coll.chunk_table), found, query, text_search.TEXT_CONFIG)

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

    def search_many(self, coll: Collection, vectors, k: int, ef_search: int = 40, exact: bool = False,
                    queries: list[str] | None = None, mode: str = "vector",
                    filters: list[filters_.Filter] | None = None) -> list[list[dict]]:
        """Top-k chunks per query. `vector`: by cosine distance, through the HNSW index, or with `exact`
        a flat scan (index scans disabled) that measures what the index itself loses. `text` and
        `hybrid` rank by BM25 over the full-text column (hybrid: fused with the vector ranking;
        jobs/store/text_search.py), `hybrid-doc` adds the document vectors' ranking (built first with
        `ensure_doc_vectors`); all but `vector` need the query texts. `filters` (jobs/store/filters.py):
        only chunks they admit. Each hit has the fields of jobs/store/hits.py and its `score`: the cosine
        in `vector` mode, the fused score otherwise."""
        where = filters_.where(filters)
        # `exact` ranks by the float32 vectors themselves, whatever the index holds: what the index loses.
        kind = "vector" if exact else self.vector_index_kind(coll) or "vector"
        if mode != "vector":
            return text_search.search(self.conn, self.schema, coll.chunk_table, mode, queries, vectors, k, ef_search,
                                      exact, self._t(doc_vectors.table_name(coll.chunk_table)), (kind, coll.dimension),
                                      where)
        table = self._t(coll.chunk_table)
        stmt = vector_index.nearest(kind, coll.dimension, table, sql.SQL("chunk_id"), where)
        depth = vector_index.depth(kind, k)
        out = []
        with self.conn.transaction():
            self.conn.execute(sql.SQL("SET LOCAL hnsw.ef_search = {}").format(sql.Literal(max(ef_search, depth))))
            if exact:
                self.conn.execute("SET LOCAL enable_indexscan = off")
            if where is not None:
                vector_index.iterative_scans(self.conn)
            for vector in vectors:
                v = np.asarray(vector, dtype=np.float32)
                rows = self.conn.execute(stmt, {"v": v, "lim": k, "depth": depth}).fetchall()
                fields = hits.fetch(self.conn, table, [r[0] for r in rows], v)
                out.append([dict(fields[c], score=float(s), bm25=None) for c, s in rows if c in fields])
        return out
