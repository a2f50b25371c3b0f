"""corpusmill's Python API: open a collection, search it as `corpusmill search` does, ingest into it.

    from jobs import open_collection, ingest

    ingest(["~/notes"], collection="notes")
    with open_collection("notes") as notes:
        for hit in notes.search("how do I rotate the API keys?", k=5, filters={"tags": "security"}):
            print(hit.score, hit.source_path, hit.heading_path, hit.snippet)

Defaults are the CLI's: the same config (`configs/local.yaml` in a checkout, else the installed copy),
the same database (DATABASE_URL, else the embedded server under CORPUSMILL_HOME), the same search mode,
ef_search and page spreading. Opening a collection only reads: it checks that the database's schema is
current and says which command brings it up to date when it is not (jobs.errors.UserError and its kinds:
the same one-line reasons the CLI prints), so a role that may only SELECT can search. Every request is
bounded (jobs/search/limits.py) and each search statement by `database.statement_timeout_s`.

A Collection searches on its one connection, one thread at a time; `concurrent(n)` lends each search one
of n pooled read-only connections instead, so that many threads (`corpusmill serve`) search at once.
"""

from __future__ import annotations

import contextlib
import logging
import numbers
import os
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psycopg
from psycopg import sql

from jobs.config import apply_overrides, load_config
from jobs.defaults import default_config
from jobs.errors import ConfigError, NotFoundError, UnreachableError
from jobs.search import Searcher
from jobs.search import filters as filters_
from jobs.search import limits as limits_
from jobs.search.ranking import MODES
from jobs.search.read_pool import ReadPool
from jobs.store import doc_vectors as doc_vectors_
from jobs.store.pgvector import PgStore, UnknownCollection
from jobs.store.url import database_url as resolve_url

log = logging.getLogger(__name__)

CHECKOUT_CONFIG = Path("configs/local.yaml")
# Passes one search makes to reach the active embedding space (a switch found costs one) before it gives up.
FOLLOWS = 3


def load_settings(config: str | os.PathLike | None = None, database_url: str | None = None, **overrides):
    """The job config the CLI would use: `config`, else configs/local.yaml here, else the installed one;
    then `database_url` and any other override jobs.config.apply_overrides takes (inputs, collection, ...)."""
    if config is None:
        config = CHECKOUT_CONFIG if CHECKOUT_CONFIG.is_file() else default_config("local.yaml")
    elif not Path(config).is_file():
        raise NotFoundError(f"config file not found: {config}")
    return apply_overrides(load_config(config), database_url=database_url, **overrides)


@dataclass(frozen=True)
class Hit:
    """One search result. `score` orders the list (the fused score; in vector mode a reciprocal rank, or
    the cosine where database.repeat_ratio is off);
    `cosine` is the chunk's similarity to the query, `bm25` its BM25 score when BM25 ranked it.
    `snippet` is the passage that matched, `highlights` the [start, end) spans of the query's words in it.
    `char_start`/`char_end` locate the chunk in its source file (Markdown) as read: without a byte-order
    mark, line endings as `\n`; `sheet`/`row` in a workbook.
    `metadata`: the document's front matter keys (a workbook: its sheet names)."""

    rank: int
    score: float
    cosine: float | None
    bm25: float | None
    chunk_id: str
    doc_id: str
    source_path: str
    source_type: str
    heading_path: list[str]
    text: str
    snippet: str
    highlights: list[list[int]] = field(default_factory=list)
    char_start: int | None = None
    char_end: int | None = None
    sheet: str | None = None
    row: int | None = None
    metadata: dict = field(default_factory=dict)

    @classmethod
    def from_row(cls, row: dict) -> Hit:
        return cls(**{f: row.get(f) for f in cls.__dataclass_fields__})

    def to_dict(self) -> dict:
        """The hit as `corpusmill search --json` and the service print it."""
        return asdict(self)


def as_filters(filters) -> list[filters_.Filter]:
    """Filters from `{"tags": "a"}`, `{"tags": ["a", "b"]}` (any of), `["tags=a", "path=docs/*"]`, or None."""
    if not filters:
        return []
    if isinstance(filters, dict):
        out = []
        for key, value in filters.items():
            values = tuple(str(v) for v in (value if isinstance(value, (list, tuple, set)) else [value]))
            if not values:
                raise ConfigError(f"filter {key!r} has no value")
            out.append(filters_.Filter(str(key), values))
        return out
    if isinstance(filters, str):
        filters = [filters]
    return filters_.parse(list(filters))


class Collection:
    """A collection, open for search. Holds one database connection and the collection's embedding
    model (loaded on the first search); use it as a context manager or call close()."""

    def __init__(self, name: str | None = None, *, config: str | os.PathLike | None = None,
                 database_url: str | None = None, settings=None):
        self.settings = settings or load_settings(config, database_url)
        self.name = name or self.settings.collection
        self.limits = limits_.DEFAULT
        self.statement_timeout_s = self.settings.database.statement_timeout_s
        self.store = PgStore(resolve_url(self.settings), self.settings.database.schema_name)
        try:
            self.store.check_schema()  # a read: never migrate() here (jobs/store/schema.py)
            coll = self.store.get_collection(self.name)
            if coll is None:
                known = ", ".join(c.name for c in self.store.list_collections()) or "none yet"
                raise UnknownCollection(f"no collection named {self.name!r} (known: {known})")
            self._set_timeout(self.store)
        except BaseException:
            self.store.close()
            raise
        self.embedding_model, self._table = coll.embedding_model, coll.chunk_table
        self._searchers: dict[str, Searcher] = {}
        self._models: dict[str, object] = {}  # the active space's model, by reference, once loaded
        # The opening connection, one thread at a time: searchers are made on it, and searches run on it
        # when there is no pool.
        self._own = threading.Lock()
        self._encode_lock = threading.Lock()  # one model, shared by every mode's searcher
        self._pool: ReadPool | None = None

    def _set_timeout(self, store: PgStore) -> None:
        ms = max(1, round(self.statement_timeout_s * 1000)) if self.statement_timeout_s else 0
        store.conn.execute("SELECT set_config('statement_timeout', %s, false)", (f"{ms}ms",))

    def __enter__(self) -> Collection:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
        self.store.close()

    def concurrent(self, connections: int, statement_timeout_s: float | None = None, wait_s: float = 30.0) -> None:
        """Let up to `connections` searches run at once, from as many threads: each borrows one of a pool of
        read-only connections (jobs/search/read_pool.py) with `statement_timeout_s` (default: the config's)."""
        if statement_timeout_s is not None:
            self.statement_timeout_s = statement_timeout_s
        self._pool = ReadPool(self.store.url, self.store.schema, connections, self.statement_timeout_s, wait_s)

    @contextlib.contextmanager
    def _lend(self):
        """The store a search runs on: one of the pool's, else the collection's own connection, to one
        thread at a time."""
        if self._pool is None:
            with self._own:
                yield self.store
        else:
            with self._pool.lend() as store:
                yield store

    def _searcher(self, mode: str | None):
        db = self.settings.database
        mode = mode or db.search_mode
        with self._own:
            if mode not in self._searchers:
                coll = self.store.get_collection(self.name)
                if coll is None:
                    raise self._gone()
                s = Searcher(self.store, self.name, ef_search=db.ef_search, mode=mode, repeat_ratio=db.repeat_ratio,
                             model=self._models.get(coll.embedding_model), encode_lock=self._encode_lock, coll=coll)
                self._models = {coll.embedding_model: s.model}
                self.embedding_model, self._table = coll.embedding_model, coll.chunk_table
                self._searchers[mode] = s
            return self._searchers[mode]

    def warm(self, mode: str | None = None) -> None:
        """Load the model (and check what the mode needs is built) now rather than on the first search."""
        self._searcher(mode)

    def metadata_keys(self, limit: int = 50, sample_rows: int | None = None) -> list[str]:
        """The metadata keys the collection's documents carry, most common first (what a filter can name).
        `sample_rows`: read about that many chunks (a block sample: TABLESAMPLE SYSTEM) instead of the
        whole table, for a figure kept by a service; a key rarer than that sample can see may be missed."""
        self.follow_active()
        table = sql.Identifier(self.store.schema, self._table)
        with self._lend() as store:
            sample = sql.SQL("")
            if sample_rows:
                est = store.conn.execute("SELECT reltuples FROM pg_class WHERE oid = to_regclass(%s)",
                                         (table.as_string(store.conn),)).fetchone()
                if est and est[0] > sample_rows:
                    sample = sql.SQL(" TABLESAMPLE SYSTEM ({})").format(sql.Literal(100.0 * sample_rows / est[0]))
            try:
                rows = store.conn.execute(sql.SQL(
                    "SELECT k, count(DISTINCT doc_id) FROM {}{}, jsonb_object_keys(metadata) AS k "
                    "WHERE jsonb_typeof(metadata) = 'object' GROUP BY k ORDER BY 2 DESC, k LIMIT %s").format(
                    table, sample), (limit,)).fetchall()
            except psycopg.errors.QueryCanceled as exc:
                raise self._timed_out("reading the metadata keys", "pass sample_rows") from exc
        return [r[0] for r in rows]

    def _timed_out(self, what: str, advice: str) -> limits_.SearchTimeout:
        return limits_.SearchTimeout(
            f"{what} ran past the statement timeout ({self.statement_timeout_s:g} s, "
            f"database.statement_timeout_s) and was stopped: {advice}")

    def search(self, query: str, k: int = 5, mode: str | None = None, filters=None,
               min_similarity: float | None = None) -> list[Hit]:
        """The k chunks that best answer `query`. `mode`: vector, text, hybrid or hybrid-doc (default: the
        config's, hybrid). `filters`: see as_filters; a chunk must pass all of them. `min_similarity`:
        drop hits whose cosine to the query is lower. A request beyond jobs/search/limits.py raises
        LimitError; a statement past the timeout, SearchTimeout (both UserErrors)."""
        return self.search_many([query], k, mode, filters, min_similarity)[0]

    def search_many(self, queries: list[str], k: int = 5, mode: str | None = None, filters=None,
                    min_similarity: float | None = None) -> list[list[Hit]]:
        """search() for each of `queries` (a list of strings), in one round of the model and the database."""
        if isinstance(queries, str):
            raise TypeError("search_many takes a list of queries, not one string: use search() for one query")
        if isinstance(k, bool) or not isinstance(k, numbers.Integral):
            raise TypeError(f"k must be an int (got {k!r})")
        if min_similarity is not None and (isinstance(min_similarity, bool)
                                           or not isinstance(min_similarity, numbers.Real)):
            raise TypeError(f"min_similarity must be a number (got {min_similarity!r})")
        queries = list(queries)
        if mode is not None and mode not in MODES:
            raise limits_.LimitError(f"unknown search mode {mode!r}: use one of {', '.join(MODES)}")
        if min_similarity is not None and not -1 <= min_similarity <= 1:  # NaN too
            raise limits_.LimitError(f"min_similarity must be a cosine, -1 to 1 (got {min_similarity})")
        parsed = as_filters(filters)
        limits_.check_request(queries, k, parsed, self.limits)
        for _ in range(FOLLOWS):
            searcher = self._searcher(mode)
            try:
                with self._lend() as store:
                    active = self._active_table(store)
                    if active == searcher.coll.chunk_table:
                        found = searcher.search_many(queries, k, filters=parsed, min_similarity=min_similarity,
                                                     store=store)
                        return [[Hit.from_row(h) for h in hits] for hits in found]
            except psycopg.errors.UndefinedTable:
                # `reembed --drop-old` dropped the table between the look at the active space and the search.
                with self._lend() as store:
                    active = self._active_table(store)
                if active == searcher.coll.chunk_table:
                    raise
            except psycopg.errors.QueryCanceled as exc:
                raise self._timed_out("the search", "narrow the query or its filters") from exc
            self._follow(active)
        raise UnreachableError(f"collection {self.name!r} kept switching its embedding space during one search; "
                               "try again")

    def follow_active(self) -> None:
        """Move to the collection's active embedding space if a reembed switched it (one indexed row read):
        what the collection's model and metadata say (`serve`'s /collection) follow it before any search."""
        with self._lend() as store:
            active = self._active_table(store)
        if active != self._table:
            self._follow(active)

    def _gone(self) -> UnknownCollection:
        return UnknownCollection(f"collection {self.name!r} no longer exists")

    def _active_table(self, store: PgStore) -> str | None:
        """The chunk table of the collection's active embedding space now (None: the collection is gone)."""
        row = store.conn.execute(sql.SQL("SELECT chunk_table FROM {} WHERE name = %s").format(
            sql.Identifier(store.schema, "collections")), (self.name,)).fetchone()
        return row[0] if row else None

    def _follow(self, table: str | None) -> None:
        """A reembed switched the collection to another embedding space (`table`) since its searchers were
        made: searchers of that space, with its model, from now on. A long-lived holder (`corpusmill
        serve`) moves with the switch as a new `corpusmill search` does."""
        if table is None:
            raise self._gone()
        with self._own:
            coll = self.store.get_collection(self.name)
            if coll is None:
                raise self._gone()
            if coll.chunk_table == self._table and all(s.coll.chunk_table == coll.chunk_table
                                                       for s in self._searchers.values()):
                return  # another thread followed it first
            log.info("collection %s: searching its active embedding space %s (%s) from now on", self.name,
                     coll.chunk_table, coll.embedding_model)
            self._models = {ref: m for ref, m in self._models.items() if ref == coll.embedding_model}
            self.embedding_model, self._table = coll.embedding_model, coll.chunk_table
            self._searchers.clear()


@dataclass(frozen=True)
class Upgraded:
    """What upgrade() did: the migrations it applied, and per collection the document vectors embedded now
    (None: the collection has none and none were asked for)."""
    schema: str
    applied: list[str]
    collections: dict[str, int | None]


def upgrade(collection: str | None = None, *, doc_vectors: bool = False, config: str | os.PathLike | None = None,
            database_url: str | None = None, settings=None) -> Upgraded:
    """What `corpusmill upgrade` does: the schema's migrations, then each collection's tables (or
    `collection`'s) brought to today's shape by the write side's own path and their search indexes built;
    with `doc_vectors`, the documents' outline vectors hybrid-doc ranks by, built or brought up to date
    (kept current for a collection that has them either way). Needs a role that may change the schema."""
    from jobs.embed.backends import load_model  # late: only document vectors need torch

    settings = settings or load_settings(config, database_url)
    done: dict[str, int | None] = {}
    with PgStore(resolve_url(settings), settings.database.schema_name) as store:
        applied = store.migrate()
        for name in [collection] if collection else [c.name for c in store.list_collections()]:
            coll = store.get_collection(name)
            if coll is None:
                raise UnknownCollection(f"no collection named {name!r}")
            coll = store.ensure_collection(coll.name, coll.embedding_model, coll.dimension)
            store.ensure_indexes(coll, settings.database)
            done[name] = None
            if doc_vectors or doc_vectors_.exists(store.conn, store.schema, coll.chunk_table):
                model = load_model(coll.embedding_model)
                done[name] = store.ensure_doc_vectors(coll, lambda texts, m=model: m.encode(
                    texts, normalize_embeddings=True, show_progress_bar=False, batch_size=64))
    return Upgraded(settings.database.schema_name, applied, done)


def open_collection(name: str | None = None, *, config: str | os.PathLike | None = None,
                    database_url: str | None = None) -> Collection:
    """The collection `name` (default: the config's `collection`), ready to search."""
    return Collection(name, config=config, database_url=database_url)


def ingest(inputs: list[str | os.PathLike] | str | os.PathLike, collection: str | None = None, *,
           config: str | os.PathLike | None = None, database_url: str | None = None, output: str | None = None,
           allow_delete_all: bool = False):
    """Ingest `inputs` (folders, files or object-store URIs) into `collection`, as `corpusmill ingest`
    does: only what changed since the last run, resumable. Returns the run's jobs.ingest.IngestResult
    (run_id, metrics, failures, totals, output_dir). `allow_delete_all`: as --allow-delete-all."""
    from jobs.ingest import run_ingest  # late: Ray and the stages load only for an ingest

    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    paths = [str(p) if "://" in str(p) else str(Path(p).expanduser()) for p in inputs]
    return run_ingest(load_settings(config, database_url, inputs=paths, collection=collection, output=output,
                                    allow_delete_all=allow_delete_all))
