"""Reload the database from runs' Parquet without recomputation (a new server, a lost database).

Each run's Parquet holds the documents that run committed, so loading several runs oldest first
rebuilds the state they produced. Documents are committed one by one with their checkpoint rows,
exactly as ingest does, so a reload can be interrupted and repeated. A run is read part by part, so
the driver's memory follows the size of a part, not of the run.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from jobs.chunks.ids import doc_id
from jobs.config import JobConfig
from jobs.errors import ConfigError, NotFoundError
from jobs.sources.storage import StorageOptions
from jobs.sources.uris import is_remote
from jobs.store.parquet import iter_parts
from jobs.store.pgvector import PgStore
from jobs.store.url import database_url

log = logging.getLogger(__name__)


# What the first pass reads of each part: enough to know each document's last version and the run's model.
_INDEX_COLUMNS = ["collection", "source_path", "chunk_id", "embedding_model"]


@dataclass
class _RunIndex:
    """Pass one over a run's parts (a few columns each): in which part each document's last version is.
    A resumed run (or a part written just before a kill, whose documents the resumed run processed
    again) can hold one document in two parts: the later part is the version that committed last, so
    it replaces the earlier one whole, and within a part each chunk_id counts once."""

    name: str | None = None
    models: set = field(default_factory=set)
    last: dict[str, int] = field(default_factory=dict)  # doc_id -> index of the part with its last version
    dropped: int = 0  # rows not loaded: repeats within a part, and versions a later part replaced

    @classmethod
    def read(cls, parts, collection: str | None) -> "_RunIndex":
        index, rows_of = cls(), {}
        for i, part in enumerate(parts):
            if not part.num_rows:
                continue
            index.name = index.name or collection or part.column("collection")[0].as_py()
            index.models |= {m for m in part.column("embedding_model").to_pylist() if m}
            seen: dict[str, set] = defaultdict(set)
            for path, chunk in zip(part.column("source_path").to_pylist(), part.column("chunk_id").to_pylist()):
                doc = doc_id(index.name, path)
                index.dropped += chunk in seen[doc]
                seen[doc].add(chunk)
            for doc, chunks in seen.items():
                index.dropped += rows_of.get(doc, 0)
                index.last[doc], rows_of[doc] = i, len(chunks)
        return index


def _documents(part, index: _RunIndex, i: int) -> list[list[dict]]:
    """Part i's documents whose last version it holds, each chunk once (its last row), in seq order."""
    docs: dict[str, dict[str, dict]] = defaultdict(dict)
    for r in part.to_pylist():
        # doc_id derives from the collection name, so a load under another name re-derives it:
        # the next ingest into that collection must find (and replace) these rows.
        r["doc_id"] = doc_id(index.name, r["source_path"])
        if index.last.get(r["doc_id"]) == i:
            docs[r["doc_id"]][r["chunk_id"]] = r
    return [sorted(rows.values(), key=lambda r: r["seq"]) for rows in docs.values()]


def load_from_parquet(cfg: JobConfig, run_dirs: list[Path | str], collection: str | None = None) -> dict:
    """Each run's documents committed as ingest commits them. The Parquet is read part by part, twice (a
    few columns, then whole), so the driver holds one part and an entry per document, not the run."""
    loaded = {"documents": 0, "vectors": 0, "shared": 0, "runs": 0, "duplicates_dropped": 0}
    storage = StorageOptions.from_config(cfg.storage)
    locked: set[str] = set()
    with PgStore(database_url(cfg), cfg.database.schema_name, reconnect_seconds=cfg.database.reconnect_seconds) as store:
        store.migrate()
        coll = None
        for run_dir in run_dirs:
            if not is_remote(run_dir) and not (Path(run_dir) / "chunks").is_dir():
                raise NotFoundError(f"{run_dir} has no chunks/ folder: is it a corpusmill run directory?")
            index = _RunIndex.read(iter_parts(run_dir, storage, columns=_INDEX_COLUMNS), collection)
            if index.name is None:
                if is_remote(run_dir):
                    raise NotFoundError(f"{run_dir} has no chunks/ parts: is it a corpusmill run directory?")
                continue
            if len(index.models) != 1:
                raise ConfigError(f"{run_dir}: expected one embedding model in the run, found {sorted(index.models)}")
            name = index.name
            loaded["duplicates_dropped"] += index.dropped
            for i, part in enumerate(iter_parts(run_dir, storage)):
                if not part.num_rows:
                    continue
                if "content_sha256" not in part.column_names:
                    raise ConfigError(f"{run_dir} was written before runs recorded content_sha256; re-run ingest instead")
                if coll is None or coll.name != name:
                    if name not in locked:  # no ingest may commit into the collection while it is reloaded
                        store.lock_collection(name, f"corpusmill load {Path(str(run_dir)).name}",
                                              cfg.database.lock_wait_seconds)
                        locked.add(name)
                    coll = store.ensure_collection(name, next(iter(index.models)),
                                                   part.schema.field("embedding").type.list_size)
                for chunks in _documents(part, index, i):
                    head = chunks[0]
                    doc = {k: head[k] for k in ("doc_id", "source_path", "source_type", "content_sha256",
                                                "pipeline_fingerprint")}
                    kept = [dict(c, collection=name) for c in chunks if not c["omitted"]]
                    committed = store.commit_document(coll, doc, kept, head["run_id"],
                                                      share_text=cfg.database.shared_text == "once")
                    loaded["vectors"] += committed.vectors
                    loaded["shared"] += committed.shared
                    loaded["documents"] += 1
            loaded["runs"] += 1
            log.info("loaded %s: %d documents so far (%d duplicate rows dropped)", run_dir, loaded["documents"],
                     loaded["duplicates_dropped"])
        if coll is not None:
            store.ensure_hnsw_index(coll, cfg.database.hnsw_m, cfg.database.hnsw_ef_construction)
            store.ensure_text_index(coll)
            loaded["collection"] = coll.name
    return loaded
