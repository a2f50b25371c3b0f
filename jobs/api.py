"""corpusmill's Python API: open a collection, search it as `corpusmill search` does, ingest into it.

    from jobs import open_collection, ingest

    ingest(["~/notes"], collection="notes")
    with open_collection("notes") as notes:
        for hit in notes.search("how do I rotate the API keys?", k=5, filters={"tags": "security"}):
            print(hit.score, hit.source_path, hit.heading_path, hit.snippet)

Defaults are the CLI's: the same config (`configs/local.yaml` in a checkout, else the installed copy),
the same database (DATABASE_URL, else the embedded server under CORPUSMILL_HOME), the same search mode,
ef_search and page spreading. Opening a collection brings the database's schema up to date, or says why
it cannot (jobs.errors.UserError and its kinds: the same one-line reasons the CLI prints).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from psycopg import sql

from jobs.config import apply_overrides, load_config
from jobs.defaults import default_config
from jobs.errors import ConfigError, NotFoundError
from jobs.search import Searcher
from jobs.store import filters as filters_
from jobs.store.pgvector import PgStore, UnknownCollection
from jobs.store.url import database_url as resolve_url

CHECKOUT_CONFIG = Path("configs/local.yaml")


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
    """One search result. `score` orders the list (the fused score; the cosine in plain vector mode);
    `cosine` is the chunk's similarity to the query, `bm25` its BM25 score when BM25 ranked it.
    `snippet` is the passage that matched, `highlights` the [start, end) spans of the query's words in it.
    `char_start`/`char_end` locate the chunk in its source file (Markdown); `sheet`/`row` in a workbook.
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
        self.store = PgStore(resolve_url(self.settings), self.settings.database.schema_name)
        try:
            self.store.migrate()
            coll = self.store.get_collection(self.name)
            if coll is None:
                known = ", ".join(c.name for c in self.store.list_collections()) or "none yet"
                raise UnknownCollection(f"no collection named {self.name!r} (known: {known})")
        except BaseException:
            self.store.close()
            raise
        self.embedding_model, self._table = coll.embedding_model, coll.chunk_table
        self._searchers: dict[str, object] = {}
        self._model = None

    def __enter__(self) -> Collection:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.store.close()

    def _searcher(self, mode: str | None):
        db = self.settings.database
        mode = mode or db.search_mode
        if mode not in self._searchers:
            s = Searcher(self.store, self.name, ef_search=db.ef_search, mode=mode, repeat_ratio=db.repeat_ratio,
                         model=self._model)
            self._model = s.model
            self._searchers[mode] = s
        return self._searchers[mode]

    def warm(self, mode: str | None = None) -> None:
        """Load the model (and make sure the search indexes exist) now rather than on the first search."""
        self._searcher(mode)

    def metadata_keys(self, limit: int = 50) -> list[str]:
        """The metadata keys the collection's documents carry, most common first (what a filter can name)."""
        rows = self.store.conn.execute(sql.SQL(
            "SELECT k, count(DISTINCT doc_id) FROM {}, jsonb_object_keys(metadata) AS k "
            "WHERE jsonb_typeof(metadata) = 'object' GROUP BY k ORDER BY 2 DESC, k LIMIT %s").format(
            sql.Identifier(self.store.schema, self._table)), (limit,))
        return [r[0] for r in rows]

    def search(self, query: str, k: int = 5, mode: str | None = None, filters=None,
               min_similarity: float | None = None) -> list[Hit]:
        """The k chunks that best answer `query`. `mode`: vector, text, hybrid or hybrid-doc (default: the
        config's, hybrid). `filters`: see as_filters; a chunk must pass all of them. `min_similarity`:
        drop hits whose cosine to the query is lower."""
        return self.search_many([query], k, mode, filters, min_similarity)[0]

    def search_many(self, queries: list[str], k: int = 5, mode: str | None = None, filters=None,
                    min_similarity: float | None = None) -> list[list[Hit]]:
        if k < 1:
            raise ConfigError(f"k must be at least 1 (got {k})")
        searcher = self._searcher(mode)
        found = searcher.search_many(list(queries), k, filters=as_filters(filters), min_similarity=min_similarity)
        return [[Hit.from_row(h) for h in hits] for hits in found]


def open_collection(name: str | None = None, *, config: str | os.PathLike | None = None,
                    database_url: str | None = None) -> Collection:
    """The collection `name` (default: the config's `collection`), ready to search."""
    return Collection(name, config=config, database_url=database_url)


def ingest(inputs: list[str | os.PathLike] | str | os.PathLike, collection: str | None = None, *,
           config: str | os.PathLike | None = None, database_url: str | None = None, output: str | None = None):
    """Ingest `inputs` (folders, files or object-store URIs) into `collection`, as `corpusmill ingest`
    does: only what changed since the last run, resumable. Returns the run's jobs.ingest.IngestResult
    (run_id, metrics, failures, totals, output_dir)."""
    from jobs.ingest import run_ingest  # late: Ray and the stages load only for an ingest

    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    paths = [str(p) if "://" in str(p) else str(Path(p).expanduser()) for p in inputs]
    return run_ingest(load_settings(config, database_url, inputs=paths, collection=collection, output=output))
