"""Reprocess a collection's stored chunks with another embedding model, beside the old space, on Ray.

The new space is its own chunk table (own dimension, own HNSW index). Filling it is a Ray Data job, as
an ingest is: the driver asks the database for ranges of the documents the space still lacks (cut by
the server, so the driver holds ranges, not ids), read tasks fetch each range's stored chunks, the
embedding actor pool embeds their `embed_text` (laid out as an ingest's: jobs/embed/layout.py, on GPUs
when the config asks for them), and parallel writers commit whole documents into the space
(jobs/store/space_sink.py). A document is in the space wholly or not at all, so a killed re-embed
resumes where it stopped. Going back to a model the collection had before reuses the vectors of
unchanged texts (jobs/store/spaces.py): documents with no changed text are copied on the server
before the job starts (when that is all of them, Ray never starts), and of the rest only changed
chunks are embedded; texts another collection embedded with the same model take its vectors
(`embedding.reuse_other_collections`). When every document is in,
the collection switches to the space in one transaction and the previous one is retired
(`--drop-old` drops it); while any document is missing (one failed, a block was lost), it does not
switch, and the next run retries those. Chunks are
re-embedded from their stored `embed_text`: boundaries stay as chunked; re-run `ingest` with the new
model in the config to re-chunk to its token limit. The model's backend (torch, onnx, openvino; int8)
is the config's unless the reference names one (`MODEL#onnx-int8`); it is part of the space's identity.

`bench-embedders` fills its scratch spaces in-process instead (`fill_space`): one model load there
embeds both the chunks and the questions.
"""

from __future__ import annotations

import logging
import os
import time
from collections import defaultdict
from dataclasses import dataclass

import pyarrow as pa

from jobs.config import JobConfig
from jobs.embed.backends import check_backend
from jobs.embed.encoder import Embedder
from jobs.embed.layout import embed_layout, embed_resources, embedder_args
from jobs.embed.models import embedding_dimension, join_ref, split_ref
from jobs.errors import UserError
from jobs.rows import CHUNK_SCHEMA
from jobs.store.known_vectors import KnownVectors, vectors_to_reuse
from jobs.store.pgvector import Collection, PgStore, UnknownCollection
from jobs.store.staging import WriterStore
from jobs.store.url import database_url

log = logging.getLogger(__name__)

# The chunk rows, numbered within their document (`pos`; jobs/store/spaces.py space_rows says why).
SPACE_SCHEMA = CHUNK_SCHEMA.append(pa.field("pos", pa.int32()))


class ReembedIncomplete(UserError, RuntimeError):
    """Documents the new space still lacks after the job: the collection stays on its old space."""


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
    actors: int = 0  # embedding actors × workers each, writers, and the nodes the writers ran on
    workers: int = 0
    writers: int = 0
    nodes: int = 0
    reused: int = 0  # of `chunks`: vectors not computed (an earlier space's for the same text, or a batch repeat)

    @property
    def computed(self) -> int:
        return self.chunks - self.reused


def _fingerprint_with(cfg: JobConfig, model: str) -> str:
    data = cfg.model_dump(by_alias=True)
    data["embedding"]["model"], data["embedding"]["backend"], data["embedding"]["quantize"] = split_ref(model)
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
    store.upgrade_lexical(active)  # a table from before the terms were analysed on the workers gets them first
    return active


def switch_to(store: PgStore, cfg: JobConfig, active: Collection, space: Collection) -> None:
    store.switch_space(active, space, _fingerprint_with(cfg, active.embedding_model),
                       _fingerprint_with(cfg, space.embedding_model), _moves(store, cfg, active, space))


def _moves(store: PgStore, cfg: JobConfig, active: Collection, space: Collection) -> dict[str, str]:
    """The documents' fingerprints a switch moves besides the one `cfg` makes: a collection ingested with
    another config than the reembed's (`configs/local.yaml`, then a reembed on a GPU with
    `configs/gpu.yaml`) keeps its chunks, so each fingerprint moves to the new model's under the config
    of the run that made it, where that config still makes it (the same pipeline version, the same
    templates). Each run's config is taken with the collection's active model, not the run's own: after
    two reembeds in a row the documents' fingerprints are ones no run recorded. Documents under a
    fingerprint no run's config explains are said: the next ingest re-chunks them."""
    held = store.document_fingerprints(active.name) - {_fingerprint_with(cfg, active.embedding_model)}
    moves: dict[str, str] = {}
    for config in store.run_configs(active.name):
        if not held - moves.keys():
            break
        try:
            theirs = JobConfig.model_validate(dict(config, database={**config.get("database", {}), "url": None}))
            fp = _fingerprint_with(theirs, active.embedding_model)
        except (ValueError, TypeError, AttributeError):  # a config of an older release that no longer validates
            continue
        if fp in held and fp not in moves:
            moves[fp] = _fingerprint_with(theirs, space.embedding_model)
    unexplained = len(held - moves.keys())
    if unexplained:
        log.warning("collection %r holds documents chunked under %d configuration(s) that neither this config nor "
                    "its runs' recorded configs make now (another pipeline version or changed templates): the next "
                    "ingest re-chunks them", active.name, unexplained)
    return moves


def read_space_rows(ranges: list[dict], *, url: str, schema: str, active: Collection, space: Collection,
                    reuse: bool, reconnect_seconds: float) -> list[dict]:
    """The read tasks' stage: each range's stored chunks that `space` lacks, as chunk rows to embed."""
    with WriterStore(url, schema, application_name="corpusmill reembed read", reconnect_seconds=reconnect_seconds) as store:
        return [dict(r, row_kind="chunk", omitted=False) for rng in ranges
                for r in store.space_rows(active, space, rng["first"], rng["last"], reuse)]


def _fill_on_ray(cfg: JobConfig, url: str, active: Collection, space: Collection, ranges: list[tuple],
                 todo: int, already: tuple[int, int], reuse: bool, refuse: bool,
                 known: KnownVectors | None) -> tuple[object, tuple[int, int, int]]:
    """The Ray Data job: read tasks → the embedding actor pool → writers into `space`. Returns the
    writers' SinkStats and (actors, workers per actor, writers). Encoders this Ray cannot run are refused
    where `refuse` (a local Ray this call started), else warned of (jobs/cluster_fit.py)."""
    # Late: Ray, Ray Data and the stages' adapter load only when there is work (the CLI stays quick).
    import ray
    import ray.data

    from jobs import adapter, cluster_fit  # late: see above
    from jobs.ray_session import cores_of, live_nodes, tell_unrunnable  # late: see above
    from jobs.store.datasink import writer_args  # late: see above
    from jobs.store.space_sink import SpaceDatasink, SpaceProgress  # late: see above

    schema, retries = cfg.database.schema_name, cfg.ray.task_retries
    cluster = ray.cluster_resources()
    cores = cores_of(cluster)
    read = cfg.ray.parse.model_copy(update={"batch_size": 1, "pool_size": None})
    actors, workers = embed_layout(cfg, cluster, cores, todo, not os.environ.get("RAY_ADDRESS"), others=read.num_cpus)
    # Its read tasks feed the encoders, with parse's CPUs.
    tell_unrunnable(cluster_fit.shortfall(cluster_fit.pools(cfg, actors, workers, sentences=False), live_nodes(),
                                          cluster_fit.Feed(read.num_cpus, "ray.parse")), refuse)
    writers = cfg.sink.writers_for(cores)
    log.info("re-embedding %d documents in %d ranges: %d embedding actor(s) × %d worker(s), %d writers", todo,
             len(ranges), actors, workers, writers)
    ds = ray.data.from_items([{"first": a, "last": b} for a, b, _ in ranges],
                             override_num_blocks=max(1, min(256, len(ranges))))
    ds = adapter.apply(ds, adapter.Stage("read_chunks", read_space_rows, SPACE_SCHEMA, read, {
        "url": url, "schema": schema, "active": active, "space": space, "reuse": reuse,
        "reconnect_seconds": cfg.database.reconnect_seconds}), retries)
    ds = adapter.apply(ds, adapter.Stage("embed", Embedder, SPACE_SCHEMA, embed_resources(cfg, actors, workers),
                                         embedder_args(cfg, workers, space.embedding_model, known),
                                         calls_per_actor=min(workers, 2)), retries)
    # A block lost past its retries leaves its documents out of the space: the run then does not switch
    # and says so, and the next one retries them, instead of one lost worker aborting the whole job. A bug
    # comes back as rows that stop it (jobs/adapter.py). This job's own context, not the process-wide one.
    ds.context.max_errored_blocks = -1
    sink = SpaceDatasink(url, schema, space, label=f"corpusmill reembed {space.name}", batch_rows=cfg.sink.flush_rows,
                         batch_seconds=cfg.sink.flush_seconds, reconnect_seconds=cfg.database.reconnect_seconds)
    with SpaceProgress(url, schema, space, todo, already):
        ds.write_datasink(sink, concurrency=writers, ray_remote_args=writer_args(None, url, cfg.sink.placement))
    return sink.stats, (actors, workers, writers)


def run_reembed(cfg: JobConfig, collection: str, model: str, *, drop_old: bool = False,
                docs_per_batch: int = 32) -> ReembedResult:
    """Fill a space for `model` with the collection's chunks (`docs_per_batch` documents per read task)
    and switch to it; see the module docstring."""
    from jobs.ray_session import init_ray, stop_ray_in_background  # late: imports Ray

    started = time.monotonic()
    if "#" not in model:  # the config's backend, unless the reference names one (jobs/embed/models.py)
        model = join_ref(model, cfg.embedding.backend, cfg.embedding.quantize)
    check_backend(model)
    dimension = embedding_dimension(model)  # a model that is not here is told before the database is touched
    url = database_url(cfg)
    with PgStore(url, cfg.database.schema_name, reconnect_seconds=cfg.database.reconnect_seconds) as store:
        store.migrate()
        # An ingest committing into the old space while it is copied would be lost at the switch; the
        # active space is read under the lock, since a reembed that waited for another finds it moved.
        store.lock_collection(collection, f"corpusmill reembed {collection} {model}", cfg.database.lock_wait_seconds)
        active = open_active(store, collection)
        space = store.begin_space(active, model, dimension)
        already = store.space_size(space)
        # Documents whose every text is unchanged since this model's earlier space need no model at all.
        copied_docs, copied_rows = store.copy_reusable_documents(active, space)
        if copied_docs:
            log.info("%d documents (%d chunks) copied with the vectors of this model's earlier space: nothing "
                     "to embed", copied_docs, copied_rows)
        ranges = store.missing_ranges(active, space, docs_per_batch)
        todo = sum(n for _, _, n in ranges)
        reused = store.reusable(active, space)
        log.info("re-embedding %s with %s: %d documents to do (%d vectors of unchanged texts reused from its earlier "
                 "space), %d already done", collection, model, todo, reused, already[0])
        layout, stats = (0, 0, 0), None
        if ranges:
            ray_started = init_ray(cfg)
            try:
                # Progress counts from what the space holds now: the documents copied above are not this fill's.
                stats, layout = _fill_on_ray(cfg, url, active, space, ranges, todo, store.space_size(space),
                                             store.has_reuse(space), ray_started,
                                             vectors_to_reuse(store, url, cfg.database.schema_name, cfg.embedding,
                                                              space.embedding_model, space.dimension,
                                                              building=space.chunk_table))
            finally:
                if ray_started:
                    stop_ray_in_background().join(timeout=30)
        missing = store.missing_count(active, space)
        if missing:
            failed = stats.failures if stats else []
            first = f"; the first failure: {failed[0]['source_path']}: {failed[0]['error_class']}: " \
                    f"{failed[0]['message']}" if failed else ""
            raise ReembedIncomplete(
                f"{missing} documents of {collection!r} are not in the new space ({len(failed)} failed{first}); the "
                f"collection stays on {active.embedding_model}. Run the same command again to retry them.")
        store.ensure_indexes(space, cfg.database)
        switch_to(store, cfg, active, space)
        store.drop_reuse(space)
        dropped = store.drop_retired(collection) if drop_old else []
    return ReembedResult(collection, active.embedding_model, model, space.chunk_table,
                         copied_docs + (stats.docs_done if stats else 0), already[0],
                         copied_rows + (stats.chunks if stats else 0), time.monotonic() - started, dropped, *layout,
                         len(stats.nodes) if stats else 0, copied_rows + reused + (stats.reused if stats else 0))
