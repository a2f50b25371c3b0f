"""Reprocess a collection's stored chunks with another embedding model, beside the old space.

The new space is its own chunk table (own dimension, own HNSW index), filled document by document
in transactions, so a killed re-embed resumes where it stopped. When every document is in, the
collection switches to it in one transaction and the previous space is retired (`--drop-old`
drops it). Chunks are re-embedded from their stored `embed_text`: boundaries stay as chunked; re-run
`ingest` with the new model in the config to re-chunk to its token limit.

It embeds in the driver process, on its GPU when it has one (`embedding.device`).
"""

from __future__ import annotations

import logging
import os
import time
from collections import defaultdict
from dataclasses import dataclass

from jobs.config import JobConfig
from jobs.embed.encoder import Embedder
from jobs.embed.models import embedding_dimension
from jobs.store.pgvector import Collection, PgStore, UnknownCollection
from jobs.store.url import database_url

log = logging.getLogger(__name__)


@dataclass
class ReembedResult:
    collection: str
    old_model: str
    new_model: str
    table: str
    documents: int  # re-embedded in this run
    resumed_from: int  # documents already in the new space when this run started
    chunks: int
    seconds: float
    dropped: list[str]


def _fingerprint_with(cfg: JobConfig, model: str) -> str:
    data = cfg.model_dump(by_alias=True)
    data["embedding"]["model"] = model
    return JobConfig.model_validate(data).fingerprint()


def make_embedder(cfg: JobConfig, model: str) -> Embedder:
    emb = cfg.embedding
    # Re-embedding runs in this one process. With `workers_per_actor: auto` it takes the ingest's encoder
    # shape over every core (one worker per `torch_threads` cores); with only `pool_size: auto` the
    # configured torch_threads is the per-actor share of an ingest's pool, so torch takes every core.
    threads, workers = emb.torch_threads, emb.workers_per_actor
    if workers == "auto":
        workers = 1 if emb.resources.num_gpus else max(1, (os.cpu_count() or 1) // (threads or 1))
    elif emb.resources.pool_size == "auto":
        threads = None
    return Embedder(model, device=emb.device, dtype=emb.dtype, encode_batch_size=emb.encode_batch_size,
                    torch_threads=threads, num_gpus=emb.resources.num_gpus, workers=workers)


def fill_space(store: PgStore, active: Collection, space: Collection, embedder: Embedder,
               docs_per_batch: int = 32) -> tuple[int, int]:
    """Embed the active space's chunks that `space` still lacks into it, document by document.
    Returns (documents, chunks) embedded now."""
    todo = store.docs_missing_from(active, space)
    chunks_done = 0
    for i in range(0, len(todo), docs_per_batch):
        chunks = store.chunks_of(active, todo[i:i + docs_per_batch])
        vectors = embedder.encode([c["embed_text"] for c in chunks])
        per_doc: dict[str, list[dict]] = defaultdict(list)
        for c, v in zip(chunks, vectors):
            per_doc[c["doc_id"]].append(dict(c, embedding=v, embedding_model=space.embedding_model))
        for doc_id, rows in per_doc.items():
            store.load_space_document(space, doc_id, rows)
        chunks_done += len(chunks)
        log.info("embedded %d/%d documents (%d chunks) into %s", min(i + docs_per_batch, len(todo)), len(todo),
                 chunks_done, space.chunk_table)
    return len(todo), chunks_done


def open_active(store: PgStore, collection: str) -> Collection:
    active = store.get_collection(collection)
    if active is None:
        raise UnknownCollection(f"no collection named {collection!r}")
    return active


def switch_to(store: PgStore, cfg: JobConfig, active: Collection, space: Collection) -> None:
    store.switch_space(active, space, _fingerprint_with(cfg, active.embedding_model),
                       _fingerprint_with(cfg, space.embedding_model))


def run_reembed(cfg: JobConfig, collection: str, model: str, *, drop_old: bool = False,
                docs_per_batch: int = 32) -> ReembedResult:
    started = time.monotonic()
    with PgStore(database_url(cfg), cfg.database.schema_name, reconnect_seconds=cfg.database.reconnect_seconds) as store:
        store.migrate()
        # An ingest committing into the old space while it is copied would be lost at the switch; the
        # active space is read under the lock, since a reembed that waited for another finds it moved.
        store.lock_collection(collection, f"corpusmill reembed {collection} {model}", cfg.database.lock_wait_seconds)
        active = open_active(store, collection)
        space = store.begin_space(active, model, embedding_dimension(model))
        already = store.document_count(space)
        log.info("re-embedding %s with %s (%d documents already done)", collection, model, already)
        documents, chunks = fill_space(store, active, space, make_embedder(cfg, model), docs_per_batch)
        store.ensure_hnsw_index(space, cfg.database.hnsw_m, cfg.database.hnsw_ef_construction)
        store.ensure_text_index(space)
        switch_to(store, cfg, active, space)
        dropped = store.drop_retired(collection) if drop_old else []
    return ReembedResult(collection, active.embedding_model, model, space.chunk_table, documents, already,
                         chunks, time.monotonic() - started, dropped)
