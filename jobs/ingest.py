"""The ingest job: discover and plan, then the stages into the Parquet + pgvector sink.

    work items ─┬─ markdown: parse (tasks) ─► sentences (spaCy actors) ─► chunk (tasks) ─┐
                └─ excel: rows → chunks (tasks) ─────────────────────────────────────────┴─► embed (actors) ─► sink

A run runs its stages on Ray Data (jobs/on_ray.py). On a local Ray whose sentences run on CPU, the
three Markdown stages are one pass inside the spaCy actors (`ray.fuse_markdown`). The sink is
parallel write tasks on the workers (`sink.writers`), each committing whole documents with their
checkpoint rows (jobs/store/writers.py), so killing the job at any moment loses at most the
documents in flight; the next run resumes with them. No row passes through the driver, and no list
of the files to process either: the plan hands them to the database page by page as work items
(jobs/store/work_items.py), which the first tasks read back by ranges. A run of a
handful of documents runs the same stages and writer in this process, without Ray
(jobs/in_process.py).
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import PurePosixPath

import psycopg

from jobs.checks.gates import check_gates
from jobs.checks.index_metrics import index_metrics
from jobs.checks.metrics import run_metrics, write_summary
from jobs.chunks.ids import doc_id
from jobs.config import JobConfig
from jobs.embed.backends import check_backend
from jobs.embed.models import embedding_dimension
from jobs.embed.tokens import token_counter
from jobs.errors import UserError
from jobs.excel.discards import write_discard_report
from jobs.home import home, runs_dir
from jobs.in_process import runs_in_process, write_in_process
from jobs.markdown.sentences import check_sentence_pipeline
from jobs.plan import make_plan_for
from jobs.sources.discover import SOURCE_TYPES, SourceFile, relocate
from jobs.sources.manifest import roots_of
from jobs.sources.storage import StorageOptions
from jobs.sources.uris import is_remote, join, local_path
from jobs.store import faults
from jobs.store.connection import DatabaseUnavailable
from jobs.store.known_vectors import vectors_to_reuse
from jobs.store.locks import CollectionBusy, LeaseWatch, OwnershipLost
from jobs.store.lost import record_lost as _record_lost
from jobs.store.parquet import RunOutput, read_run_json
from jobs.store.pgvector import PgStore
from jobs.store.spaces import space_for_ingest
from jobs.store.url import database_url
from jobs.store.work_items import WorkItems
from jobs.store.writers import DocumentWriter, Progress, WriterFailed
from jobs.tools.report import write_report

log = logging.getLogger(__name__)


# Re-homing rounds at most: a round's own commits can let go of text again only when re-chunked documents
# changed their holdings, which a document re-chunked unchanged does not; one round is the norm.
REHOME_ROUNDS = 3


class RunStopped(UserError, ConnectionError):
    """A run that could not go on (its database went away, another run took its collection): one line
    that names the run and how to resume."""


@dataclass
class IngestResult:
    run_id: str
    collection: str
    fingerprint: str
    plan: dict
    metrics: dict = field(default_factory=dict)
    output_dir: str = ""
    failures: list[dict] = field(default_factory=list)
    seconds: float = 0.0
    index_built: bool = False
    totals: dict = field(default_factory=dict)  # the collection after the run (store.status)
    gate_failures: list = field(default_factory=list)  # jobs.checks.gates.GateFailure
    report: dict = field(default_factory=dict)  # QA artifact name -> path
    rehomed: int = 0  # unchanged documents re-chunked to hold text an updated one let go (shared_text)
    not_as_frozen: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures


def new_run_id() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:6]


def _cause(exc: BaseException) -> BaseException:
    """The error under Ray's wrappers (a task's exception reaches the driver inside RayTaskError and
    Ray Data's own errors)."""
    seen = []
    while exc is not None and exc not in seen:
        seen.append(exc)
        inner = getattr(exc, "cause", None) or exc.__cause__
        if inner is None:
            return exc
        exc = inner
    return seen[-1]


def one_at_a_time(cfg: JobConfig) -> JobConfig:
    """`cfg` with one document to each batch of the first stages (parse, sentences, chunk, a workbook's rows;
    on Ray each document then has a task or actor call of its own): a run's pass over documents suspected of
    killing their worker, so that each dies alone."""
    one = {"batch_size": 1}
    return cfg.model_copy(update={
        "sentences": cfg.sentences.model_copy(update={"resources": cfg.sentences.resources.model_copy(update=one)}),
        "ray": cfg.ray.model_copy(update={name: getattr(cfg.ray, name).model_copy(update=one)
                                          for name in ("parse", "chunk", "excel")})})


def _work_item(collection: str, f: SourceFile, fingerprint: str, run_id: str) -> dict:
    """What the first stage needs of a file to process (jobs.rows.WORK_FIELDS)."""
    return {"doc_id": doc_id(collection, f.source_path), "collection": collection, "source_path": f.source_path,
            "abs_path": f.abs_path, "source_type": f.source_type, "content_sha256": f.content_sha256,
            "size_bytes": f.size_bytes, "pipeline_fingerprint": fingerprint, "run_id": run_id}


def _take_released(store: PgStore, cfg: JobConfig, plan, released: list[str], storage: StorageOptions,
                   work: WorkItems, queue) -> int:
    """A deleted document may have held text other documents only recorded a copy of
    (jobs/store/shared_text.py); those were marked pending (`released`). Unchanged ones are re-chunked
    in this run rather than the next, so the text is back in the index when this run ends. The plan
    keeps no unchanged file, so each is found again under the roots (a file changed since the freeze
    of a manifest stays out, as the plan left it)."""
    candidates = sorted(set(released) - set(plan.not_as_frozen))
    planned = work.planned(candidates)
    stored = store.stored_documents(cfg.collection, [p for p in candidates if p not in planned])
    roots = roots_of(cfg.input.roots, cfg.input.manifest)
    moved = []
    for path, doc in sorted(stored.items()):
        uri = relocate(roots, path, storage) if doc.status == "pending" else None
        if uri is not None:
            moved.append(SourceFile(path, uri, SOURCE_TYPES[PurePosixPath(path).suffix.lower()], doc.source_size or 0,
                                    doc.content_sha256, doc.source_etag, hashed=False))
    if moved:
        plan.unchanged -= len(moved)
        plan.retry += moved
        plan.hand_over(queue)
        log.info("%d unchanged documents re-chunked: they shared text only a replaced or deleted document held",
                 len(moved))
    return len(moved)


# Operator names hold their stages' names: `MapBatches(chunk)`, Ray's fused `A->B`, adapter.fuse's `a+b`.
_STAGE_OPERATORS = {"parse": ("parse_markdown", "excel"), "sentences": ("sentences",), "chunk": ("chunk",),
                    "embed": ("embed",)}


def stage_summary(stage_stats: dict, vectors: int) -> dict:
    """Rows and seconds for discover, parse, sentences, chunk, embed and load: the per-stage view kept in
    the runs table. discover = listing, hashing and the plan; parse/sentences/chunk/embed = summed task
    time of the stage's Ray operator (an operator fused by Ray or by `ray.fuse_markdown` gives its time
    and output rows to each stage in it, marked `fused`; an actor running two calls at once counts
    both); load = the sink's Parquet writes and per-document COPY commits (rows: vectors loaded)."""
    def entry(rows: int, seconds: float, **extra) -> dict:
        return {"rows": rows, "seconds": round(seconds, 3),
                "rows_per_second": round(rows / seconds, 1) if seconds else None, **extra}

    discover = stage_stats.get("discover_plan", {})
    out = {"discover": entry(discover.get("files", 0), discover.get("seconds", 0.0))}
    for stage, names in _STAGE_OPERATORS.items():
        ops = [(op, s) for op, s in stage_stats.get("pipeline", {}).items()
               if set(names) & set(re.findall(r"\w+", op))]
        out[stage] = entry(sum(s["rows"] for _, s in ops), sum(s["task_seconds"] for _, s in ops),
                           **({"fused": True} if any("->" in op or "+" in op for op, _ in ops) else {}))
    out["load"] = entry(vectors, stage_stats.get("sink", {}).get("seconds", 0.0))
    return out


def run_ingest(cfg: JobConfig, run_id: str | None = None, retry_failed: bool = False) -> IngestResult:
    """Discover, plan and process. A file that failed on the content it still holds, under this pipeline, is
    not processed again (it stays failed: `status` lists it) unless `retry_failed`."""
    stopping: list[threading.Thread] = []  # a local Ray being stopped: done before returning or raising
    try:
        return _run_ingest(cfg, run_id, stopping, retry_failed)
    finally:
        for thread in stopping:
            thread.join()


def _run_ingest(cfg: JobConfig, run_id: str | None, stopping: list[threading.Thread],
                retry_failed: bool = False) -> IngestResult:
    started = time.monotonic()
    run_id = run_id or new_run_id()
    storage = StorageOptions.from_config(cfg.storage)
    out_root = cfg.output or str(runs_dir())
    if is_remote(out_root):  # s3://bucket/runs: written through a local staging copy, for the QA report
        location, staging = join(out_root, run_id), home() / "staging" / run_id
    else:
        location, staging = (local_path(out_root) / run_id).resolve(), None
    # A sentence model that is not installed is one line here, not an actor that dies on Ray.
    check_sentence_pipeline(cfg.sentences.model, cfg.sentences.download_missing)

    url = database_url(cfg)
    with PgStore(url, cfg.database.schema_name, reconnect_seconds=cfg.database.reconnect_seconds) as store, \
            contextlib.ExitStack() as scope:
        store.migrate()
        # One writer per collection, from any shell or machine: a second run waits or exits naming this one.
        store.lock_collection(cfg.collection, f"corpusmill ingest {run_id}", cfg.database.lock_wait_seconds)
        cfg = space_for_ingest(store, cfg)  # after a reembed: the collection's active model (jobs/store/spaces.py)
        fingerprint = cfg.fingerprint()
        dim = embedding_dimension(cfg.embedding.model)
        check_backend(cfg.embedding.reference)  # a missing onnx/openvino runtime is told before Ray starts
        coll = store.ensure_collection(cfg.collection, cfg.embedding.reference, dim)
        # The files to process go to the database a listing page at a time, not into this process's memory.
        work = scope.enter_context(WorkItems(url, cfg.database.schema_name, cfg.collection, run_id))

        def queue(files: list[SourceFile]) -> None:
            work.add([_work_item(cfg.collection, f, fingerprint, run_id) for f in files],
                     [(f.size_bytes, f.listing_tag) for f in files])

        t0 = time.monotonic()
        plan = make_plan_for(cfg, store, storage, on_relisted=lambda files: store.record_listing(
            cfg.collection, [(f.source_path, f.size_bytes, f.listing_tag) for f in files]), on_work=queue,
                             retry_failed=retry_failed)
        stage_stats: dict = {"discover_plan": {"files": sum(plan.counts().values()) - len(plan.delete),
                                               "read": plan.hashed, "seconds": round(time.monotonic() - t0, 3)}}
        # Before Ray starts and the run is recorded: a deletion can add re-chunks to the plan (_take_released).
        released: list[str] = []
        for path in plan.delete:
            store.delete_document(coll, path, released)
        if released:
            _take_released(store, cfg, plan, released, storage, work, queue)
        started_ray, on_ray = False, None
        documents = plan.processing
        in_process = runs_in_process(cfg, documents)  # a handful of documents: no Ray (jobs/in_process.py)
        if documents and not in_process:  # before anything is recorded: a run that cannot read its inputs never starts
            from jobs import on_ray  # late: Ray's imports take seconds, which a small run in process does without

            started_ray = on_ray.start(cfg)
        output = RunOutput(location, dim, storage, staging)
        run_dir = output.run_dir  # local: the run directory itself, or the staging copy of a remote one
        # `deleted`: the documents this run took out (a resumed run id keeps its first attempt's), so that
        # a reload of a history of runs (jobs/load.py) takes them out too.
        deleted = set(plan.delete) | set(read_run_json(output.uri, storage).get("deleted") or ())
        output.write_json("run.json", {"run_id": run_id, "collection": cfg.collection, "fingerprint": fingerprint,
                                       "plan": plan.counts(), "deleted": sorted(deleted),
                                       "config": cfg.public_dict()})
        store.start_run(run_id, cfg.collection, cfg.public_dict(), fingerprint, output.uri)
        result = IngestResult(run_id, cfg.collection, fingerprint, plan.counts(), output_dir=output.uri,
                              not_as_frozen=plan.not_as_frozen)
        log.info("run %s: %s", run_id, ", ".join(f"{v} {k}" for k, v in plan.counts().items()))

        # The listing each file came with goes on its pending row; its commit keeps it (keep_listing).
        store.mark_pending_work(cfg.collection, run_id)
        writer = on_ray.ChunkDatasink if on_ray else DocumentWriter  # Ray's write tasks, or this process
        sink = writer(url, cfg.database.schema_name, coll, run_id, label=f"corpusmill ingest {run_id}",
                      share_text=cfg.database.shared_text == "once", batch_rows=cfg.sink.flush_rows,
                      batch_seconds=cfg.sink.flush_seconds, batch_documents=cfg.sink.flush_documents,
                      reconnect_seconds=cfg.database.reconnect_seconds,
                      parts=output.part_writer(), keep_listing=True, owner=store.owner_token(cfg.collection))
        status = "ok"
        if documents:
            # Vectors of texts the collection holds (unchanged chunks of an edited page, repeated blocks) are
            # reused, and those other collections embedded with the same model.
            known = vectors_to_reuse(store, url, cfg.database.schema_name, cfg.embedding, coll.embedding_model,
                                     coll.dimension, own=coll.chunk_table)
            writers = 1
            # The fence's driver side: a run that another run took the collection from stops within seconds.
            # On Ray its job is cancelled (actors killed, tasks ended); in this process the main thread is
            # interrupted.
            watch = LeaseWatch(url, cfg.database.schema_name, cfg.collection, store.owner_token(cfg.collection))
            cancel = on_ray.JobCancel() if on_ray else None
            if cancel is not None:
                watch.on_lost(cancel)
            try:
                # Ray Data's own bars, when asked for, take the terminal: the progress then goes to the log.
                progress = Progress(url, cfg.database.schema_name, cfg.collection, run_id, documents,
                                    cfg.sink.progress_seconds, live=False if on_ray and cfg.ray.progress_bars else None)
                with progress, watch:
                    def pipeline(run_cfg: JobConfig = cfg):  # the current round's items, through the stages into the sink
                        if on_ray:
                            return on_ray.write_on_ray(run_cfg, work, storage, known, sink, output, url, cancel)
                        return write_in_process(run_cfg, work.items("markdown"), work.items("excel"), storage, known,
                                                sink), 1

                    stage_stats["pipeline"], writers = pipeline()
                    # Updated documents may have let go of text others only copied (jobs/store/shared_text.py):
                    # those are re-chunked now, so the run ends with every text in the index.
                    for _ in range(REHOME_ROUNDS):
                        released = store.released_documents(cfg.collection)
                        work.begin_round()
                        moved = _take_released(store, cfg, plan, released, storage, work, queue) if released else 0
                        if not moved:
                            break
                        store.mark_pending_work(cfg.collection, run_id, since=work.since)
                        result.rehomed += moved
                        stage_stats["rehome"] = {"documents": result.rehomed, "pipeline": pipeline()[0]}
                    # Documents this run lost that would now settle (lost in the runs before too) go through
                    # once more, one to a batch: one that kills its worker then dies alone, and those only
                    # lost beside it in its batch, run after run, commit instead of settling with it.
                    settling = [doc["source_path"] for doc, settles in work.lost(cfg.ray.lost_document_runs)
                                if settles]
                    if settling:
                        work.begin_round()
                        log.info("%d document(s) lost in %d runs in a row: each processed once more, alone",
                                 work.repeat(settling), cfg.ray.lost_document_runs)
                        stage_stats["alone"] = {"documents": len(settling), "pipeline": pipeline(one_at_a_time(cfg))[0]}
            except BaseException as exc:
                # Committed documents stay committed; the rest stay pending and the next run resumes them.
                cause = OwnershipLost(watch.lost) if watch.lost else _cause(exc)
                database_fault = (isinstance(cause, (DatabaseUnavailable, CollectionBusy, psycopg.Error))
                                  or getattr(cause, "database", False))
                if not isinstance(cause, DatabaseUnavailable):  # a server that is gone would be waited for again
                    try:
                        store.finish_run(run_id, "aborted", {"plan": plan.counts()}, {})
                    except Exception:  # the database itself is what failed: nothing more can be recorded
                        log.debug("could not record the aborted run", exc_info=True)
                if database_fault:
                    try:
                        done = store.run_document_counts(cfg.collection, run_id)
                        so_far = f"after {done['done'] + done['failed']} of {documents} documents"
                    except Exception:  # the server is what failed: say what is known
                        so_far = f"with some of {documents} documents committed"
                    what = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
                    if isinstance(cause, OwnershipLost):
                        raise RunStopped(f"run {run_id} stopped {so_far}: {what}") from exc
                    if not getattr(cause, "resumable", faults.resumable(cause)):  # the same batches would fail again
                        raise RunStopped(f"run {run_id} stopped {so_far}: {what}" + (
                            "" if isinstance(cause, WriterFailed) else
                            f". Every committed document is kept; {faults.advice(cause)}")) from exc
                    raise RunStopped(
                        f"run {run_id} stopped {so_far}: "
                        f"{what}. Every committed document is kept; run the same command again to resume "
                        f"(the rest are still pending)") from exc
                raise
            _record_lost(store, coll, run_id, sink.stats, work, cfg.ray.lost_document_runs)
            output.fetch_parts()
            stage_stats["sink"] = {"documents": documents, "seconds": round(sink.stats.seconds, 3),
                                   "writers": writers, "transactions": sink.stats.transactions,
                                   "nodes": len(sink.stats.nodes), "in_process": in_process}
            stage_stats["stages"] = stage_summary(stage_stats, sink.stats.vectors)
            if started_ray:
                stopping.append(on_ray.stop())
            t_index = time.monotonic()
            result.index_built = store.ensure_indexes(coll, cfg.database)
            stage_stats["stages"]["index"] = {"built": result.index_built,
                                              "seconds": round(time.monotonic() - t_index, 3)}

        limit = min(cfg.chunking.max_tokens, token_counter(cfg.embedding.model).limit)
        index = None
        if documents or plan.delete:
            # The collection changed: measure what is now in the index and hold it to the gates. Its cost
            # is bounded whatever the collection's size (exact counts, bounded samples: index_metrics).
            # A server restart after the write (the run's documents are in) must not fail the run here.
            t_upkeep = time.monotonic()
            index = store.read(index_metrics, coll, token_limit=limit)
            index["shared_text"] = shared = store.shared_text_counts(coll)
            if shared["whole_copies"]:
                index["warnings"].append(
                    f"{shared['whole_copies']} documents have nothing of their own stored: every chunk repeats "
                    f"another document's text (copies or includes?): {', '.join(shared['whole_copy_paths'][:5])}"
                    + (" …" if shared["whole_copies"] > 5 else ""))
            stage_stats["upkeep"] = {"seconds": round(time.monotonic() - t_upkeep, 3)}
        # The run's time includes its upkeep; the summary's last steps (the QA report) add to result.seconds below.
        result.seconds = time.monotonic() - started
        result.failures = sink.stats.failures
        result.metrics = run_metrics(sink.stats, plan.counts(), result.seconds)
        result.metrics["discovery"] = plan.discovery()  # links not followed: listed by the QA report
        result.metrics["stages"] = stage_stats | {"seconds_total": round(result.seconds, 2)}
        result.metrics["rehomed"] = result.rehomed
        result.metrics["token_limit"] = limit
        if index is not None:
            result.metrics["index"] = index
            result.gate_failures = check_gates(cfg.gates, index, result.metrics)
            result.metrics["gates"] = [asdict(g) for g in result.gate_failures]
            for warning in index.get("warnings", []):
                log.warning("index: %s", warning)
        output.write_json("qa/metrics.json", result.metrics)
        write_summary(output.qa_dir / "summary.md", result.metrics)
        if sink.stats.failures:
            output.write_errors(sink.stats.failures)
            status = "failed_files"
        elif result.gate_failures:
            status = "failed_gates"
        chunks = result.metrics["chunks"]
        store.finish_run(run_id, status, result.metrics["files"] | {
            "chunks": sink.stats.chunks, "vectors": sink.stats.vectors,
            "vectors_computed": chunks["vectors_computed"], "vectors_reused": chunks["vectors_reused"]},
                         result.metrics["stages"])
        result.totals = store.status(cfg.collection)
    try:
        result.report = (write_report(run_dir) if cfg.report else {}) | write_discard_report(run_dir)
    except Exception:  # the run's data is committed; a broken plot must not turn it into a failure
        log.exception("could not write the QA report for %s (`corpusmill report --run-id %s` retries)", run_id, run_id)
    try:
        output.publish("qa")  # a remote run directory gets the report (a local one has it already)
        output.drop_staged_parts()
    except Exception:
        log.exception("could not upload the QA report of %s to %s (`corpusmill report --run-id %s` retries)",
                      run_id, output.uri, run_id)
    result.seconds = time.monotonic() - started  # what the run took, to its last step: the time it reports
    return result
