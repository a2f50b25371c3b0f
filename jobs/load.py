"""Reload the database from runs' Parquet without recomputation (a new server, a lost database).

Each run's Parquet holds the documents that run committed, so loading several runs oldest first
rebuilds the state they produced. Documents are committed one by one with their checkpoint rows,
exactly as ingest does, so a reload can be interrupted and repeated.
"""

from __future__ import annotations

import logging
from collections import defaultdict
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


def _documents(parts, name: str) -> tuple[dict[str, list[dict]], int]:
    """A run's chunk rows by document, each chunk once. A resumed run (or a part written just before a
    kill, whose documents the resumed run processed again) can hold one document in two parts: the
    later part is the version that committed last, so it replaces the earlier one whole, and within it
    each chunk_id counts once. Returns (rows by doc_id, rows dropped as duplicates)."""
    per_doc: dict[str, list[dict]] = {}
    dropped = 0
    for part in parts:
        in_part: dict[str, dict[str, dict]] = defaultdict(dict)
        for r in part.to_pylist():
            # doc_id derives from the collection name, so a load under another name re-derives it:
            # the next ingest into that collection must find (and replace) these rows.
            r["doc_id"] = doc_id(name or r["collection"], r["source_path"])
            dropped += r["chunk_id"] in in_part[r["doc_id"]]
            in_part[r["doc_id"]][r["chunk_id"]] = r
        for doc, rows in in_part.items():
            dropped += len(per_doc.get(doc, ()))
            per_doc[doc] = sorted(rows.values(), key=lambda r: r["seq"])
    return per_doc, dropped


def load_from_parquet(cfg: JobConfig, run_dirs: list[Path | str], collection: str | None = None) -> dict:
    loaded = {"documents": 0, "vectors": 0, "shared": 0, "runs": 0, "duplicates_dropped": 0}
    storage = StorageOptions.from_config(cfg.storage)
    locked: set[str] = set()
    with PgStore(database_url(cfg), cfg.database.schema_name, reconnect_seconds=cfg.database.reconnect_seconds) as store:
        store.migrate()
        coll = None
        for run_dir in run_dirs:
            if not is_remote(run_dir) and not (Path(run_dir) / "chunks").is_dir():
                raise NotFoundError(f"{run_dir} has no chunks/ folder: is it a corpusmill run directory?")
            parts = [p for p in iter_parts(run_dir, storage) if p.num_rows]
            if not parts:
                if is_remote(run_dir):
                    raise NotFoundError(f"{run_dir} has no chunks/ parts: is it a corpusmill run directory?")
                continue
            if "content_sha256" not in parts[0].column_names:
                raise ConfigError(f"{run_dir} was written before runs recorded content_sha256; re-run ingest instead")
            dimension = parts[0].schema.field("embedding").type.list_size
            models = {m for p in parts for m in p.column("embedding_model").to_pylist() if m}
            if len(models) != 1:
                raise ConfigError(f"{run_dir}: expected one embedding model in the run, found {sorted(models)}")
            name = collection or parts[0].column("collection")[0].as_py()
            if name not in locked:  # no ingest may commit into the collection while it is reloaded
                store.lock_collection(name, f"corpusmill load {Path(str(run_dir)).name}", cfg.database.lock_wait_seconds)
                locked.add(name)
            coll = store.ensure_collection(name, models.pop(), dimension)
            per_doc, dropped = _documents(parts, name)
            loaded["duplicates_dropped"] += dropped
            for chunks in per_doc.values():
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
