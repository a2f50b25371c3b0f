"""Reload the database from runs' Parquet without recomputation (a new server, a lost database).

Each run's Parquet holds the documents that run committed, so loading several runs oldest first
rebuilds the state they produced. Documents are committed one by one with their checkpoint rows,
exactly as ingest does, so a reload can be interrupted and repeated.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from pathlib import Path

import pyarrow.parquet as pq

from jobs.chunk.ids import doc_id
from jobs.config import JobConfig
from jobs.ingest import database_url
from jobs.sources import fs
from jobs.store.parquet import read_chunks
from jobs.store.pgvector import PgStore

log = logging.getLogger(__name__)


def load_from_parquet(cfg: JobConfig, run_dirs: list[Path | str], collection: str | None = None) -> dict:
    loaded = {"documents": 0, "vectors": 0, "runs": 0}
    storage = fs.StorageOptions.from_config(cfg.storage)
    with PgStore(database_url(cfg), cfg.database.schema_name) as store:
        store.migrate()
        coll = None
        for run_dir in run_dirs:
            if fs.is_remote(run_dir):  # s3://bucket/runs/<run_id>, gs://…, abfs://…
                table = read_chunks(str(run_dir), storage)
                if table.num_columns == 0:
                    raise FileNotFoundError(f"{run_dir} has no chunks/ parts: is it a corpusmill run directory?")
            else:
                parts = Path(run_dir) / "chunks"
                if not parts.is_dir():
                    raise FileNotFoundError(f"{run_dir} has no chunks/ folder: is it a corpusmill run directory?")
                table = pq.read_table(parts)
            if "content_sha256" not in table.column_names:
                raise ValueError(f"{run_dir} was written before runs recorded content_sha256; re-run ingest instead")
            if table.num_rows == 0:
                continue
            dimension = table.schema.field("embedding").type.list_size
            rows = table.to_pylist()
            models = {r["embedding_model"] for r in rows if r["embedding_model"]}
            if len(models) != 1:
                raise ValueError(f"{run_dir}: expected one embedding model in the run, found {sorted(models)}")
            name = collection or rows[0]["collection"]
            coll = store.ensure_collection(name, models.pop(), dimension)
            per_doc: dict[str, list[dict]] = defaultdict(list)
            for r in rows:
                # doc_id derives from the collection name, so a load under another name re-derives it:
                # the next ingest into that collection must find (and replace) these rows.
                r["doc_id"] = doc_id(name, r["source_path"])
                per_doc[r["doc_id"]].append(r)
            for chunks in per_doc.values():
                head = chunks[0]
                doc = {k: head[k] for k in ("doc_id", "source_path", "source_type", "content_sha256",
                                            "pipeline_fingerprint")}
                kept = [dict(c, collection=name) for c in chunks if not c["omitted"]]
                loaded["vectors"] += store.commit_document(coll, doc, kept, head["run_id"])
                loaded["documents"] += 1
            loaded["runs"] += 1
            log.info("loaded %s: %d documents so far", run_dir, loaded["documents"])
        if coll is not None:
            store.ensure_hnsw_index(coll, cfg.database.hnsw_m, cfg.database.hnsw_ef_construction)
            loaded["collection"] = coll.name
    return loaded
