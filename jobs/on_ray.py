"""A run's stages on Ray Data: the dataset of work items through the stage specs (jobs/pipeline.py)
into the parallel writers (jobs/store/datasink.py), on a local Ray this process starts or a cluster
it joins (jobs/ray_session.py).

    work items ─┬─ markdown: parse (tasks) ─► sentences (spaCy actors) ─► chunk (tasks) ─┐
                └─ excel: rows → chunks (tasks) ─────────────────────────────────────────┴─► embed (actors) ─► writers

The work items start as ranges of the run's rows in the `work_items` table (jobs/store/work_items.py),
read by the branch's first tasks, so the driver never holds a list of every file.

jobs/ingest.py imports this module only for a run that uses Ray: Ray and Ray Data take seconds to
import, which a small run in process (jobs/in_process.py) does without.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import threading
from dataclasses import replace

import ray
import ray.data

from jobs import adapter, cluster_fit
from jobs.adapter import Stage
from jobs.config import JobConfig, ResourcesConfig
from jobs.embed.layout import embed_layout, embed_resources
from jobs.errors import ConfigError
from jobs.pipeline import embed_stage, excel_stage, markdown_stages
from jobs.ray_session import JobCancel, cores_of, init_ray, live_nodes, stop_ray_in_background, tell_unrunnable
from jobs.rows import WORK_SCHEMA
from jobs.sources.manifest import roots_of
from jobs.sources.reads import local_read_refusal, read_bytes
from jobs.sources.storage import StorageOptions
from jobs.sources.uris import is_remote
from jobs.store.datasink import ChunkDatasink, writer_args
from jobs.store.known_vectors import KnownVectors
from jobs.store.parquet import RunOutput
from jobs.store.work_items import WorkItems, read_work_items

log = logging.getLogger(__name__)

# A run of at most SMALL_RUN_DOCUMENTS documents fills only a few embedding batches (512 rows at the
# defaults, some 50 documents): gathered that way its documents would reach the writers in one or two
# groups at its very end, so progress would sit at 0 and an interrupt would keep nothing. Such a run
# is split into at least SMALL_RUN_GROUPS first blocks, and embeds SMALL_RUN_EMBED_ROWS rows a call,
# so each block goes through embedding and on to a write task of its own as soon as it is chunked.
# Above it the configured sizes stand: every batch then fills long before the run ends.
SMALL_RUN_DOCUMENTS = 256
SMALL_RUN_GROUPS = 8
SMALL_RUN_EMBED_ROWS = 32


def first_block_documents(documents: int, of_type: int, per_block: int) -> int:
    """Documents per first block of a source type with `of_type` of the run's `documents`, from the
    configured `per_block` (SMALL_RUN_DOCUMENTS)."""
    if documents > SMALL_RUN_DOCUMENTS:
        return per_block
    return max(1, min(per_block, -(-of_type // SMALL_RUN_GROUPS)))


def embed_batch_rows(documents: int, rows: int) -> int:
    """Rows per embedding call of a run of `documents`, from the configured `rows` (SMALL_RUN_DOCUMENTS)."""
    return rows if documents > SMALL_RUN_DOCUMENTS else min(rows, SMALL_RUN_EMBED_ROWS)


# Fault injection for tests: a glob of source paths whose worker process exits (as under an OOM kill) when
# the run's first stage is handed them, so that a run loses them (LostDocument) as a real fault would.
KILL_WORKER_ENV = "CORPUSMILL_FAULT_KILL_WORKER"


def kill_worker_on(rows: list[dict], pattern: str) -> list[dict]:
    """Stage: the work items as they are, unless one's path matches `pattern`: then the process exits."""
    if any(fnmatch.fnmatchcase(r["source_path"], pattern) for r in rows):
        os._exit(1)
    return rows


def start(cfg: JobConfig, counts: dict[str, int]) -> bool:
    """Ray up (a local one started, or the cluster of RAY_ADDRESS joined), able to read the inputs and to
    run the actor pools for `counts` ({source type: files}). Returns whether this process started it (then
    `stop` ends it)."""
    started = init_ray(cfg)
    try:
        check_reachable(cfg)
        check_fits(cfg, counts, refuse=started)
    except BaseException:
        if started:  # a run refused before it began leaves no Ray of its own behind (an API caller goes on)
            ray.shutdown()
        raise
    return started


def stop() -> threading.Thread:
    """Stop the local Ray this process started, in the background (jobs/ray_session.py)."""
    return stop_ray_in_background()


def write_on_ray(cfg: JobConfig, work: WorkItems, storage: StorageOptions | None, known: KnownVectors | None,
                 sink: ChunkDatasink, output: RunOutput, url: str, cancel: JobCancel | None = None) -> tuple[dict, int]:
    """The run's work items through the stages into `sink`'s parallel write tasks. Returns the per-operator
    rows and seconds (operator_stats) and the number of writers; Ray Data's own stats go to the run
    directory's ray_stats.txt. `cancel` (jobs.ray_session.JobCancel) can stop the job from another thread
    (the fence): its actors and tasks end at once, and this raises CancelledJob."""
    ds = build_dataset(cfg, work, storage, known)
    writers = cfg.sink.writers_for(cores_of(ray.cluster_resources()))
    log.info("writing: %d parallel writers", writers)
    if cancel is not None:
        cancel.watch(ds)
    try:
        ds.write_datasink(sink, concurrency=writers,
                          ray_remote_args=writer_args(output.uri, url, cfg.sink.placement))
    finally:
        if cancel is not None:  # a cancelled execution ends as if done, or in whatever its killed tasks raised
            cancel.raise_if_cancelled()
    written = getattr(ds, "_write_ds", None) or ds  # write_datasink runs the plan as a dataset of its own
    try:
        output.write_text("ray_stats.txt", written.stats() + "\n")
    except Exception:  # stats are a nicety; never fail a finished run over them
        log.debug("could not write Ray Data stats", exc_info=True)
    return operator_stats(written), writers


def check_reachable(cfg: JobConfig) -> None:
    """Refuse a plain local input path on a multi-node Ray (see local_read_refusal); Ray must be up."""
    alive = sum(1 for node in ray.nodes() if node.get("Alive"))
    refusal = local_read_refusal(roots_of(cfg.input.roots, cfg.input.manifest), alive, cfg.input.read_via_driver)
    if refusal:
        raise ConfigError(refusal)


def check_fits(cfg: JobConfig, counts: dict[str, int], refuse: bool) -> None:
    """Whether this Ray can run the actor pools, and the tasks that feed them, of an ingest of `counts` as
    build_dataset lays them out (jobs/cluster_fit.py); told by tell_unrunnable."""
    local = not os.environ.get("RAY_ADDRESS")
    cluster = ray.cluster_resources()
    actors, workers = embed_layout(cfg, cluster, cores_of(cluster), max(1, sum(counts.values())), local)
    wanted = cluster_fit.pools(cfg, actors, workers, sentences=bool(counts.get("markdown")))
    tell_unrunnable(cluster_fit.shortfall(wanted, live_nodes(), cluster_fit.feed(cfg, counts, fuse_markdown(cfg, local))),
                    refuse)


def fuse_markdown(cfg: JobConfig, local: bool = True) -> bool:
    """Whether the Markdown stages run as one (`ray.fuse_markdown`). On a local CPU Ray the parse and
    chunk tasks cost more in worker processes and Arrow round trips than their own work
    (fused, their CPU time about halved). On a GPU they would hold the GPU actor while the GPU waits, and on a
    cluster (`local` false) autoscaling parse and chunk tasks read and chunk in parallel beside the
    fixed pool of spaCy actors."""
    if cfg.ray.fuse_markdown == "auto":
        return local and not cfg.sentences.resources.num_gpus
    return cfg.ray.fuse_markdown


def build_dataset(cfg: JobConfig, work: WorkItems, storage: StorageOptions | None = None,
                  known: KnownVectors | None = None):
    """The Ray Data plan: one branch per source type, unioned before the embedding actor pool. Each
    branch starts from ranges of the run's work items (jobs/store/work_items.py), which its first tasks
    read from the database; work items carry each source's path or object URI, and the parse tasks
    read it on their own node, with `storage` (endpoint, region, secret-file credentials as SecretStr)
    shipped in the stage arguments."""
    local = not os.environ.get("RAY_ADDRESS")  # a Ray of this process's own, not a cluster joined
    retries = cfg.ray.task_retries
    counts = work.counts()
    documents = sum(counts.values())
    reader = Stage("work_items", read_work_items, WORK_SCHEMA, ResourcesConfig(num_cpus=0.25, batch_size=1),
                   {"url": work.url, "schema": work.schema, "reconnect_seconds": cfg.database.reconnect_seconds})

    def source(source_type: str, rows_per_block: int):
        ds = _source(source_type, rows_per_block)
        killer = os.environ.get(KILL_WORKER_ENV)
        if killer:  # a test's fault: the worker handed a matching file dies (jobs/store/lost.py)
            ds = adapter.apply(ds, Stage("fault", kill_worker_on, WORK_SCHEMA, ResourcesConfig(num_cpus=0.25, batch_size=1),
                                         {"pattern": killer}), retries)
        return ds

    def _source(source_type: str, rows_per_block: int):
        # One block per batch of the first stage (a small run's smaller), at most 256 blocks: bigger blocks would
        # delay the first commits, smaller ones only add per-task overhead (every task costs the driver, the
        # raylet and a worker).
        n = counts[source_type]
        per_block = max(first_block_documents(documents, n, rows_per_block), -(-n // 256))
        # Up to ray.driver_items_max files the driver hands the items over whole (~1 KB each, bounded):
        # the range-read tasks are an operator of their own, which cost a 300-page ingest 1.12-1.18x
        # its wall time against the code before (f4f72c0). Beyond it the first tasks read them by ranges.
        if cfg.input.read_via_driver or n <= cfg.ray.driver_items_max:
            items = work.items(source_type)
            if cfg.input.read_via_driver:  # the bytes travel in the items: this driver holds them all anyway
                for item in items:  # local files only: object-store URIs are read by the tasks themselves
                    if not is_remote(item["abs_path"]):
                        item["content"] = read_bytes(item["abs_path"])
            return ray.data.from_items(items, override_num_blocks=-(-n // per_block))
        ranges = work.ranges(source_type, per_block)
        return adapter.apply(ray.data.from_items(ranges, override_num_blocks=len(ranges)), reader, retries)

    branches = []
    if counts.get("markdown"):
        stages = markdown_stages(cfg, storage)
        if fuse_markdown(cfg, local):
            # The fused stage takes each first block whole: a larger batch would join a small run's blocks again.
            res = cfg.sentences.resources
            res = res.model_copy(update={"batch_size": first_block_documents(documents, counts["markdown"],
                                                                             res.batch_size)})
            md = adapter.apply(source("markdown", res.batch_size), adapter.fuse(stages, res), retries)
        else:
            md = source("markdown", cfg.ray.parse.batch_size)
            for stage in stages:  # each takes a small run's blocks as they come, as the fused stage does
                size = first_block_documents(documents, counts["markdown"], stage.resources.batch_size)
                md = adapter.apply(md, replace(stage, resources=stage.resources.model_copy(
                    update={"batch_size": size})), retries)
        branches.append(md)
    if counts.get("excel"):
        branches.append(adapter.apply(source("excel", cfg.ray.excel.batch_size), excel_stage(cfg, storage), retries))
    ds = branches[0] if len(branches) == 1 else branches[0].union(*branches[1:])
    emb = cfg.embedding
    cluster = ray.cluster_resources()
    cores = cores_of(cluster)
    actors, workers = embed_layout(cfg, cluster, cores, documents, local)
    log.info("embedding: %d actor(s) × %d encoder worker(s), %s torch thread(s) each (%s)", actors, workers,
             emb.torch_threads or "default",
             f"{cluster.get('GPU', 0):g} GPU(s)" if emb.resources.num_gpus else f"{cores} cores")
    resources = embed_resources(cfg, actors, workers)
    resources = resources.model_copy(update={"batch_size": embed_batch_rows(documents, resources.batch_size)})
    ds = adapter.apply(ds, embed_stage(cfg, resources, workers, known), retries)
    # A block whose task failed past its retries (its worker died each time) is dropped instead of
    # aborting the run: the sink then finds its documents missing and records them `LostDocument`,
    # to be retried by the next run (_record_lost). Our stages turn a document's data faults into error
    # rows, and the adapter a bug into rows that stop the run (jobs/adapter.py), so what fails a whole
    # block is a lost worker. Set on this job's own context (its datasets share it; the write runs
    # under it), not the process-wide one, which a later job in this process would inherit.
    ds.context.max_errored_blocks = -1
    return ds


def operator_stats(ds) -> dict:
    """Rows and summed task wall time per Ray Data operator (fused operators share one entry).
    Ray's stats summary is not a stable API, so this is best effort and never fails a run."""
    try:
        out, todo = {}, [ds._get_stats_summary()]
        while todo:
            summary = todo.pop()
            todo.extend(summary.parents)
            for op in summary.operators_stats:
                rows = int(op.output_num_rows.sum) if op.output_num_rows else 0
                wall = float(op.wall_time.sum) if op.wall_time else 0.0
                out[op.operator_name] = {"rows": rows, "task_seconds": round(wall, 3),
                                         "rows_per_task_second": round(rows / wall, 1) if wall else None}
        return out
    except Exception:
        log.debug("no operator stats", exc_info=True)
        return {}
