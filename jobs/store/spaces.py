"""Embedding spaces: a collection's chunk tables, one per model, of which one is active. `reembed`
fills a new space beside the active one and switches to it in one transaction: PgStore's share.

A mixin, as jobs/store/runs.py is: it needs the store's connection (`self.conn`), its schema-qualified
names (`self._t`) and the chunk-table builder.

A document is in a space when its rows are: the space's own checkpoint. A re-embed's writers replace a
document's rows in one transaction (`load_space_documents`), so a document is wholly in or not at all,
and what a killed re-embed still owes is what `missing_ranges` finds.

Going back to a model the collection had before reuses its vectors: the retired space's chunk ids,
embedded texts and vectors are kept aside (`<table>_reuse`) when it is rebuilt, and a chunk whose
embedded text is unchanged is read with its old vector (`space_rows`), so only changed chunks are
embedded again. The reuse table goes when the collection switches.

After a switch the config that built the collection still names its earlier model: an ingest then
embeds with the active space (`space_for_ingest`), since its vectors could not join the collection's
otherwise.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
from psycopg import sql

from jobs.errors import UserError
from jobs.model_refs import split_ref
from jobs.store import arrow_copy, doc_vectors, lexical
from jobs.store.arrow_copy import CHUNK_COLUMNS
from jobs.store.connection import reconnecting
from jobs.store.names import chunk_table_name, reuse_table_name

if TYPE_CHECKING:
    from jobs.config import JobConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Collection:
    name: str
    embedding_model: str
    dimension: int
    chunk_table: str


class CollectionMismatch(UserError, ValueError):
    pass


def space_for_ingest(store, cfg: JobConfig) -> JobConfig:
    """`cfg` with the embedding model an ingest of its collection uses: the collection's active one when
    the config sets no embedding model or names one of the collection's retired spaces (a config written
    before a `reembed`), said in one log line. A model the collection has never been switched to is
    refused: its vectors cannot join the collection's."""
    active = store.get_collection(cfg.collection)
    wanted = cfg.embedding.reference
    if active is None or active.embedding_model == wanted:
        return cfg
    model, backend, quantize = split_ref(active.embedding_model)
    pinned = bool(cfg.embedding.model_fields_set & {"model", "backend", "quantize"})
    if pinned and wanted not in store.retired_models(cfg.collection):
        keys = f"embedding.model: {model}" + (f", embedding.backend: {backend}" if backend != "torch" else "") + (
            f", embedding.quantize: {quantize}" if quantize != "none" else "")
        raise CollectionMismatch(
            f"collection {cfg.collection!r} embeds with {active.embedding_model}, but the config's embedding.model "
            f"names {wanted}, which the collection has never been switched to: set {keys} (or leave the model out "
            f"of the config), use another collection, or move this one with `corpusmill reembed --collection "
            f"{cfg.collection} --model {wanted}`")
    log.info("collection %r embeds with %s (its active space since a reembed); this run uses it, not %s",
             cfg.collection, active.embedding_model,
             f"the config's earlier embedding.model {wanted}" if pinned else f"the default {wanted}")
    embedding = cfg.embedding.model_copy(update={"model": model, "backend": backend, "quantize": quantize})
    return cfg.model_copy(update={"embedding": embedding})


class EmbeddingSpaces:
    def _record_space(self, coll: Collection, status: str) -> None:
        self.conn.execute(sql.SQL(
            "INSERT INTO {} (collection, chunk_table, embedding_model, dimension, status) VALUES (%s, %s, %s, %s, %s) "
            "ON CONFLICT (collection, chunk_table) DO UPDATE SET status = EXCLUDED.status").format(
            self._t("embedding_spaces")), (coll.name, coll.chunk_table, coll.embedding_model, coll.dimension, status))

    @reconnecting
    def begin_space(self, active: Collection, model: str, dimension: int) -> Collection:
        """A new chunk table beside the active one, for `model`; idempotent, so a rerun resumes it."""
        table = chunk_table_name(active.name, model, dimension)
        if table == active.chunk_table:
            raise CollectionMismatch(f"collection {active.name!r} already uses {model} ({dimension} dimensions)")
        space = Collection(active.name, model, dimension, table)
        status = self.conn.execute(sql.SQL(
            "SELECT status FROM {} WHERE collection = %s AND chunk_table = %s").format(self._t("embedding_spaces")),
            (active.name, table)).fetchone()
        with self.conn.transaction():
            if status and status[0] == "retired":
                # A space this collection left earlier holds stale chunks: it starts afresh, but the vectors
                # of texts that did not change are still right, so they wait in its reuse table.
                reuse = self._t(reuse_table_name(table))
                self.conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(reuse))
                self.conn.execute(sql.SQL("CREATE TABLE {} AS SELECT chunk_id, embed_text, embedding FROM {}").format(
                    reuse, self._t(table)))
                self.conn.execute(sql.SQL("ALTER TABLE {} ADD PRIMARY KEY (chunk_id)").format(reuse))
                self.conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(self._t(table)))
                doc_vectors.drop(self.conn, self.schema, table)
            self._create_chunk_table(table, dimension)
            if status and status[0] == "building":
                self._drop_stale(active, space)
            # The space's BM25 weights are the active space's (same terms, same pivot): copied, not recomputed.
            lexical.copy_pivot(self.conn, self.schema, active.chunk_table, table)
            self._record_space(space, "building")
        return space

    def _drop_stale(self, active: Collection, space: Collection) -> None:
        """A resumed space (a reembed killed, then run again) holds what its first attempt copied; an ingest
        in between may have changed or deleted some of those documents in the active space, and only the
        reembed writes the building space. Its documents whose rows differ from the active space's in
        anything but the vector (or that the active space no longer holds) leave it, so this attempt embeds
        them again: else the switch would carry their old version, or a deleted page, into the new space."""
        cols = sql.SQL(", ").join(sql.Identifier(c) for c, _ in CHUNK_COLUMNS
                                  if c not in ("embedding", "embedding_model"))
        gone = self.conn.execute(sql.SQL(
            "WITH b AS (SELECT doc_id, md5(row({cols})::text) AS h FROM {space}), "
            "a AS (SELECT doc_id, md5(row({cols})::text) AS h FROM {active} WHERE doc_id IN (SELECT doc_id FROM b)), "
            "stale AS (SELECT doc_id FROM (SELECT * FROM b EXCEPT SELECT * FROM a) x "
            "UNION SELECT doc_id FROM (SELECT * FROM a EXCEPT SELECT * FROM b) y) "
            "DELETE FROM {space} WHERE doc_id IN (SELECT doc_id FROM stale) RETURNING doc_id").format(
            cols=cols, space=self._t(space.chunk_table), active=self._t(active.chunk_table))).fetchall()
        if gone:
            log.info("%d documents changed or deleted since the first attempt of this reembed: embedded again",
                     len({r[0] for r in gone}))

    @reconnecting
    def docs_missing_from(self, active: Collection, space: Collection) -> list[str]:
        """Documents of the active space not yet copied into `space` (what a resumed reembed still owes)."""
        rows = self.conn.execute(sql.SQL("SELECT DISTINCT a.doc_id FROM {} ORDER BY a.doc_id").format(
            self._missing(active, space)))
        return [r[0] for r in rows]

    @reconnecting
    def space_size(self, coll: Collection) -> tuple[int, int]:
        """(documents, chunks) a space holds."""
        return tuple(self.conn.execute(sql.SQL("SELECT count(DISTINCT doc_id), count(*) FROM {}").format(
            self._t(coll.chunk_table))).fetchone())

    @reconnecting
    def chunks_of(self, coll: Collection, doc_ids: list[str]) -> list[dict]:
        cols = [c for c, _ in CHUNK_COLUMNS if c != "embedding"]
        cur = self.conn.execute(sql.SQL("SELECT {} FROM {} WHERE doc_id = ANY(%s) ORDER BY doc_id, seq").format(
            arrow_copy.selected(cols), self._t(coll.chunk_table)), (doc_ids,))
        return [dict(zip(cols, r)) for r in cur]

    def load_space_document(self, space: Collection, doc_id: str, chunks: list[dict]) -> None:
        """One document's re-embedded chunks (row dicts) into the new space: load_space_documents for one."""
        self.load_space_documents(space, [doc_id], arrow_copy.rows_table(chunks))

    @reconnecting
    def switch_space(self, active: Collection, space: Collection, old_fingerprint: str | None,
                     new_fingerprint: str | None, more: dict[str, str] | None = None) -> None:
        """Make `space` the collection's active space in one transaction; the old one is retired.
        Documents checkpointed under the old model's fingerprint move to the new one (and those under
        each fingerprint of `more` to its new one), so the next ingest with the new model re-chunks
        nothing."""
        moves = dict(more or {})
        if old_fingerprint and new_fingerprint:
            moves[old_fingerprint] = new_fingerprint
        with self.conn.transaction():
            self.conn.execute(sql.SQL(
                "UPDATE {} SET embedding_model = %s, dimension = %s, chunk_table = %s WHERE name = %s").format(
                self._t("collections")), (space.embedding_model, space.dimension, space.chunk_table, active.name))
            self._record_space(active, "retired")
            self._record_space(space, "active")
            for old, new in moves.items():
                self.conn.execute(sql.SQL(
                    "UPDATE {} SET pipeline_fingerprint = %s WHERE collection = %s AND pipeline_fingerprint = %s").format(
                    self._t("documents")), (new, active.name, old))
            self._refresh_view()

    @reconnecting
    def document_fingerprints(self, collection: str) -> set[str]:
        """The pipeline fingerprints the collection's documents are checkpointed under."""
        return {r[0] for r in self.conn.execute(sql.SQL(
            "SELECT DISTINCT pipeline_fingerprint FROM {} WHERE collection = %s AND pipeline_fingerprint IS NOT NULL"
        ).format(self._t("documents")), (collection,))}

    @reconnecting
    def run_configs(self, collection: str, limit: int = 200) -> list[dict]:
        """The distinct configs the collection's runs were made with, newest first (at most `limit`)."""
        return [r[0] for r in self.conn.execute(sql.SQL(
            "SELECT config FROM {} WHERE collection = %s AND config IS NOT NULL GROUP BY config "
            "ORDER BY max(started_at) DESC LIMIT %s").format(self._t("runs")), (collection, limit))]

    @reconnecting
    def tables_embedded_with(self, model: str, dimension: int, limit: int = 8) -> list[str]:
        """Chunk tables of any collection's spaces that hold `model`'s vectors (the exact reference: backend
        and quantization included), active spaces first, then the newest: where vector reuse may look
        beyond a collection. Only tables with the md5(embed_text) index: an older one without it is left
        alone rather than scanned per lookup or locked to build it."""
        rows = self.conn.execute(sql.SQL(
            "SELECT s.chunk_table FROM {} s WHERE s.embedding_model = %s AND s.dimension = %s AND EXISTS ("
            "SELECT 1 FROM pg_indexes i WHERE i.schemaname = %s AND i.tablename = s.chunk_table "
            "AND i.indexdef LIKE '%%md5(embed_text)%%') ORDER BY s.status = 'active' DESC, s.created_at DESC "
            "LIMIT %s").format(self._t("embedding_spaces")), (model, dimension, self.schema, limit))
        return [r[0] for r in rows]

    @reconnecting
    def retired_models(self, collection: str) -> set[str]:
        """The models (references) of the collection's retired spaces: those it embedded with before."""
        return {r[0] for r in self.conn.execute(sql.SQL(
            "SELECT embedding_model FROM {} WHERE collection = %s AND status = 'retired'").format(
            self._t("embedding_spaces")), (collection,))}

    @reconnecting
    def drop_space(self, space: Collection) -> None:
        """Drop a space that is not the collection's active one (a benchmark's scratch space)."""
        active = self.get_collection(space.name)
        if active is not None and active.chunk_table == space.chunk_table:
            raise ValueError(f"{space.chunk_table} is the active space of {space.name!r}; it cannot be dropped")
        with self.conn.transaction():
            self.conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(self._t(space.chunk_table)))
            doc_vectors.drop(self.conn, self.schema, space.chunk_table)
            self._drop_reuse(space.chunk_table)
            self.conn.execute(sql.SQL("DELETE FROM {} WHERE collection = %s AND chunk_table = %s").format(
                self._t("embedding_spaces")), (space.name, space.chunk_table))

    @reconnecting
    def drop_retired(self, collection: str) -> list[str]:
        """Drop the collection's spaces other than the active one (`reembed --drop-old`, under the
        collection's lock): the retired ones, and any a killed reembed left `building`, which no command
        would drop otherwise. Returns their tables."""
        tables = [r[0] for r in self.conn.execute(sql.SQL(
            "SELECT chunk_table FROM {} WHERE collection = %s AND status IN ('retired', 'building')").format(
            self._t("embedding_spaces")), (collection,))]
        with self.conn.transaction():
            for t in tables:
                self.conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(self._t(t)))
                self._drop_reuse(t)
                doc_vectors.drop(self.conn, self.schema, t)
            self.conn.execute(sql.SQL("DELETE FROM {} WHERE collection = %s AND status IN ('retired', 'building')")
                              .format(self._t("embedding_spaces")), (collection,))
        return tables

    def _missing(self, active: Collection, space: Collection, reuse: bool = False) -> sql.Composed:
        """The active space's rows whose document `space` does not hold yet (alias a); with `reuse`, each
        joined to its vector in the space's reuse table where its embedded text is unchanged (alias r)."""
        join = sql.SQL(" LEFT JOIN {} r ON r.chunk_id = a.chunk_id AND r.embed_text = a.embed_text").format(
            self._t(reuse_table_name(space.chunk_table))) if reuse else sql.SQL("")
        return sql.SQL("{} a{} WHERE NOT EXISTS (SELECT 1 FROM {} b WHERE b.doc_id = a.doc_id)").format(
            self._t(active.chunk_table), join, self._t(space.chunk_table))

    @reconnecting
    def has_reuse(self, space: Collection) -> bool:
        """Whether vectors of an earlier version of `space` wait to be reused (begin_space)."""
        return self.conn.execute("SELECT to_regclass(%s) IS NOT NULL", (
            sql.Identifier(self.schema, reuse_table_name(space.chunk_table)).as_string(self.conn),)).fetchone()[0]

    @reconnecting
    def reusable(self, active: Collection, space: Collection) -> int:
        """Chunks still to copy into `space` whose vector its reuse table holds (0 without one)."""
        if not self.has_reuse(space):
            return 0
        return self.conn.execute(sql.SQL("SELECT count(r.embedding) FROM {}").format(
            self._missing(active, space, reuse=True))).fetchone()[0]

    @reconnecting
    def copy_reusable_documents(self, active: Collection, space: Collection) -> tuple[int, int]:
        """Copy into `space`, in one statement on the server, every document it lacks whose chunks all have
        an unchanged text in its reuse table, with those vectors: nothing to embed, so nothing leaves the
        database. Returns (documents, chunks) copied."""
        if not self.has_reuse(space):
            return 0, 0
        cols = [c for c, _ in CHUNK_COLUMNS] + ["lex"]  # lex: the weights, at the pivot the space shares
        picks = [sql.SQL("r.embedding") if c == "embedding" else sql.Literal(space.embedding_model)
                 if c == "embedding_model" else sql.Identifier("a", c) for c in cols]
        missing = self._missing(active, space, reuse=True)
        with self.conn.transaction():
            docs, rows, counted, length = self.conn.execute(sql.SQL(
                "WITH unchanged AS (SELECT a.doc_id FROM {} GROUP BY a.doc_id HAVING bool_and(r.chunk_id IS NOT NULL)), "
                "copied AS (INSERT INTO {} ({}) SELECT {} FROM {} AND a.doc_id IN (SELECT doc_id FROM unchanged) "
                "RETURNING doc_id, omitted, lex_length) SELECT count(DISTINCT doc_id), count(*), "
                "count(*) FILTER (WHERE NOT coalesce(omitted, false)), "
                "coalesce(sum(lex_length) FILTER (WHERE NOT coalesce(omitted, false)), 0) FROM copied").format(
                missing, self._t(space.chunk_table), sql.SQL(", ").join(sql.Identifier(c) for c in cols),
                sql.SQL(", ").join(picks), missing)).fetchone()
            lexical.add_totals(self.conn, self.schema, space.chunk_table, counted, length)  # as copy_table counts
            return docs, rows

    @reconnecting
    def drop_reuse(self, space: Collection) -> None:
        self._drop_reuse(space.chunk_table)

    def _drop_reuse(self, table: str) -> None:
        self.conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(self._t(reuse_table_name(table))))

    @reconnecting
    def missing_ranges(self, active: Collection, space: Collection, per_range: int) -> list[tuple[str, str, int]]:
        """The documents `space` still lacks as (first doc_id, last doc_id, documents) ranges of about
        `per_range` documents each, cut by the server: the driver holds the ranges, never the ids."""
        return [tuple(r) for r in self.conn.execute(sql.SQL(
            "SELECT min(doc_id), max(doc_id), count(*) FROM ("
            " SELECT doc_id, (row_number() OVER (ORDER BY doc_id) - 1) / %s AS part"
            " FROM (SELECT DISTINCT a.doc_id FROM {}) d) r GROUP BY part ORDER BY part").format(
            self._missing(active, space)), (per_range,))]

    @reconnecting
    def space_rows(self, active: Collection, space: Collection, first: str, last: str,
                   reuse: bool = False) -> list[dict]:
        """The active space's chunks of the documents in [first, last] that `space` lacks, each document's
        rows together in seq order with its row count (`doc_rows`) and its rows numbered from 0 (`pos`):
        a stored document's seqs have gaps (omitted chunks, text another document holds), so the
        writers tell a whole document by `pos`. With `reuse` (the space has a reuse table, has_reuse),
        `embedding` is the vector it holds for an unchanged embedded text, else None (to be embedded)."""
        cols = [c for c, _ in CHUNK_COLUMNS if c != "embedding"]
        cur = self.conn.execute(sql.SQL(
            "SELECT {}, {}, count(*) OVER w, (row_number() OVER (w ORDER BY a.seq) - 1) FROM {} "
            "AND a.doc_id BETWEEN %s AND %s WINDOW w AS (PARTITION BY a.doc_id) ORDER BY a.doc_id, a.seq").format(
            arrow_copy.selected(cols, "a"),
            sql.SQL("r.embedding::real[]" if reuse else "NULL::real[]"), self._missing(active, space, reuse)), (first, last))
        rows = [dict(zip(cols, r[:-3]), embedding=r[-3], doc_rows=r[-2], pos=r[-1]) for r in cur]
        for row in rows:
            if row["embedding"] is not None:
                row["embedding_model"] = space.embedding_model
        return rows

    @reconnecting
    def missing_count(self, active: Collection, space: Collection) -> int:
        """Documents of the active space that `space` does not hold."""
        return self.conn.execute(sql.SQL("SELECT count(DISTINCT a.doc_id) FROM {}").format(
            self._missing(active, space))).fetchone()[0]

    @reconnecting
    def load_space_documents(self, space: Collection, doc_ids: list[str], chunks: pa.Table) -> int:
        """Documents' re-embedded chunks into `space`, replacing any rows they had there, in one
        transaction (the re-embed checkpoint). Returns the rows written."""
        self._register_vector()  # a writer's store never ran migrate()
        with self.conn.transaction():
            self.conn.execute(sql.SQL("DELETE FROM {} WHERE doc_id = ANY(%s)").format(self._t(space.chunk_table)),
                              (doc_ids,))
            return arrow_copy.copy_table(self.conn, self._t(space.chunk_table), chunks)

    @reconnecting
    def space_holds(self, space: Collection, doc_id: str) -> bool:
        return self.conn.execute(sql.SQL("SELECT EXISTS (SELECT 1 FROM {} WHERE doc_id = %s)").format(
            self._t(space.chunk_table)), (doc_id,)).fetchone()[0]
