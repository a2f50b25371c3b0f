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

A run is these steps, in this order (run_ingest), each a method of `_Run`, which holds what one step
hands the next:

  open_collection  migrate the store, take the collection's write lock (a second run waits or exits),
                   its active model, fingerprint and table, and open the run's work items
  make_plan        list and hash the inputs against the store, queue the files to process as work
                   items, delete the documents gone from the inputs (and re-chunk unchanged ones that had
                   only copied text a deleted one held)
  start            start Ray (unless the run is small enough for this process), write run.json, record
                   the run started, mark its work pending and make the sink
  process          (only when there are documents) the stages under the fence: the plan's documents,
                   then the re-homing rounds, then documents lost run after run once more, alone; a
                   failure ends the run here (recorded aborted; RunStopped when the database stopped it);
                   then the lost documents recorded, Ray stopped and the vector index built
  settle           measure the index and hold it to the gates, write qa/metrics.json, summary.md and
                   the errors, record the run finished with its status
  report           the QA report, uploaded beside a remote run directory (a failure is logged: the run stands)

What a run ends with (IngestResult, or RunStopped's one line) is jobs/ingest_outcome.py.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import PurePosixPath
from types import ModuleType

from jobs.checks.gates import check_gates
from jobs.checks.index_metrics import index_metrics
from jobs.checks.metrics import run_metrics, write_summary
from jobs.chunks.ids import doc_id
from jobs.config import JobConfig
from jobs.embed.backends import check_backend
from jobs.embed.models import embedding_dimension
from jobs.embed.tokens import token_counter
from jobs.errors import ConfigError
from jobs.excel.discards import write_discard_report
from jobs.home import home, runs_dir
from jobs.in_process import runs_in_process, write_in_process
from jobs.ingest_outcome import IngestResult, RunStopped, cause_of, database_stopped, stage_summary, stop_message
from jobs.markdown.sentences import check_sentence_pipeline
from jobs.plan import delete_all_refusal, make_plan_for
from jobs.sources.changes import Plan
from jobs.sources.discover import SOURCE_TYPES, SourceFile, relocate
from jobs.sources.manifest import roots_of
from jobs.sources.storage import StorageOptions
from jobs.sources.uris import is_remote, join, local_path
from jobs.store.known_vectors import vectors_to_reuse
from jobs.store.locks import LeaseWatch, OwnershipLost
from jobs.store.lost import record_lost as _record_lost
from jobs.store.parquet import RunOutput, read_errors, read_run_json
from jobs.store.pgvector import Collection, PgStore
from jobs.store.spaces import space_for_ingest
from jobs.store.url import database_url
from jobs.store.work_items import WorkItems
from jobs.store.write_progress import Progress
from jobs.store.writers import DocumentWriter
from jobs.tools.report import write_report

log = logging.getLogger(__name__)

# Re-homing rounds at most: a round's own commits can let go of text again only when re-chunked documents
# changed their holdings, which a document re-chunked unchanged does not; one round is the norm.
REHOME_ROUNDS = 3


def new_run_id() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:6]


def one_at_a_time(cfg: JobConfig) -> JobConfig:
    """`cfg` with one document to each batch of the first stages (parse, sentences, chunk, a workbook's rows;
    on Ray each document then has a task or actor call of its own): a run's pass over documents suspected of
    killing their worker, so that each dies alone."""
    one = {"batch_size": 1}
    return cfg.model_copy(update={
        "sentences": cfg.sentences.model_copy(update={"resources": cfg.sentences.resources.model_copy(update=one)}),
        "ray": cfg.ray.model_copy(update={name: getattr(cfg.ray, name).model_copy(update=one)
                                          for name in ("parse", "chunk", "excel")})})


def run_ingest(cfg: JobConfig, run_id: str | None = None, retry_failed: bool = False) -> IngestResult:
    """Discover, plan and process. A file that failed on the content it still holds, under this pipeline, is
    not processed again (it stays failed: `status` lists it) unless `retry_failed`."""
    stopping: list[threading.Thread] = []  # a local Ray being stopped: done before returning or raising
    try:
        run = _Run(cfg, run_id or new_run_id(), retry_failed, stopping)
        with PgStore(run.url, cfg.database.schema_name, reconnect_seconds=cfg.database.reconnect_seconds) as store, \
                contextlib.ExitStack() as scope:
            run.open_collection(store, scope)
            run.make_plan()
            run.start()
            try:
                if run.documents:
                    run.process()
                else:
                    run.keep_indexes()
                run.settle()
            except BaseException:
                run.abandon()
                raise
        run.report()
        return run.result
    finally:
        for thread in stopping:
            thread.join()


class _Run:
    """One ingest run: its steps, in the order of the module docstring, and what each hands the next."""

    # open_collection
    store: PgStore
    coll: Collection
    fingerprint: str
    dim: int
    work: WorkItems
    # make_plan
    plan: Plan
    # start
    documents: int
    in_process: bool
    output: RunOutput | None = None
    result: IngestResult
    sink: DocumentWriter  # or on_ray.ChunkDatasink
    # process
    progress: Progress
    new_in_round: int = 0  # of the documents a re-homing round takes, those this run had not processed

    def __init__(self, cfg: JobConfig, run_id: str, retry_failed: bool, stopping: list[threading.Thread]):
        self.started = time.monotonic()
        self.cfg, self.run_id, self.retry_failed, self.stopping = cfg, run_id, retry_failed, stopping
        self.storage = StorageOptions.from_config(cfg.storage)
        out_root = cfg.output or str(runs_dir())
        if is_remote(out_root):  # s3://bucket/runs: written through a local staging copy, for the QA report
            self.location, self.staging = join(out_root, run_id), home() / "staging" / run_id
        else:
            self.location, self.staging = (local_path(out_root) / run_id).resolve(), None
        # A sentence model that is not installed is one line here, not an actor that dies on Ray.
        check_sentence_pipeline(cfg.sentences.model, cfg.sentences.download_missing)
        self.url = database_url(cfg)
        self.stage_stats: dict = {}
        self.on_ray: ModuleType | None = None  # jobs.on_ray, for a run on Ray
        self.started_ray = False

    def open_collection(self, store: PgStore, scope: contextlib.ExitStack) -> None:
        self.store = store
        store.migrate()
        # One writer per collection, from any shell or machine: a second run waits or exits naming this one.
        store.lock_collection(self.cfg.collection, f"corpusmill ingest {self.run_id}",
                              self.cfg.database.lock_wait_seconds)
        cfg = self.cfg = space_for_ingest(store, self.cfg)  # after a reembed: the collection's active model
        self.fingerprint = cfg.fingerprint()
        self.dim = embedding_dimension(cfg.embedding.model)
        check_backend(cfg.embedding.reference)  # a missing onnx/openvino runtime is told before Ray starts
        self.coll = store.ensure_collection(cfg.collection, cfg.embedding.reference, self.dim)
        # The files to process go to the database a listing page at a time, not into this process's memory.
        self.work = scope.enter_context(WorkItems(self.url, cfg.database.schema_name, cfg.collection, self.run_id))

    def queue(self, files: list[SourceFile]) -> None:
        """Files to process, as work items (what the first stage needs of each: jobs.rows.WORK_FIELDS)."""
        c = self.cfg.collection
        self.work.add([{"doc_id": doc_id(c, f.source_path), "collection": c, "source_path": f.source_path,
                        "abs_path": f.abs_path, "source_type": f.source_type, "content_sha256": f.content_sha256,
                        "size_bytes": f.size_bytes, "pipeline_fingerprint": self.fingerprint, "run_id": self.run_id}
                       for f in files], [(f.size_bytes, f.listing_tag) for f in files])

    def make_plan(self) -> None:
        store, cfg = self.store, self.cfg
        t0 = time.monotonic()
        self.plan = plan = make_plan_for(cfg, store, self.storage, on_relisted=lambda files: store.record_listing(
            cfg.collection, [(f.source_path, f.size_bytes, f.listing_tag) for f in files]), on_work=self.queue,
                                         retry_failed=self.retry_failed)
        self.stage_stats["discover_plan"] = {"files": sum(plan.counts().values()) - len(plan.delete),
                                             "read": plan.hashed, "seconds": round(time.monotonic() - t0, 3)}
        refusal = delete_all_refusal(plan, cfg)
        if refusal:
            raise ConfigError(refusal)
        # Before Ray starts and the run is recorded: a deletion can add re-chunks to the plan (_take_released).
        # The run directory lists them first, so that a run that then fails to start (Ray unreachable)
        # still tells a reload of the history of runs (jobs/load.py) that they are gone.
        if plan.delete:
            self._write_run_json()
        released: list[str] = []
        for path in plan.delete:
            store.delete_document(self.coll, path, released)
        if released:
            self._take_released(released)

    def _write_run_json(self) -> RunOutput:
        """The run directory (made on the first call) and its run.json, with `deleted`: the documents this
        run took out (a resumed run id keeps its first attempt's), so that a reload of a history of runs
        (jobs/load.py) takes them out too."""
        if self.output is None:
            self.output = RunOutput(self.location, self.dim, self.storage, self.staging)
        cfg, output = self.cfg, self.output
        deleted = set(self.plan.delete) | set(read_run_json(output.uri, self.storage).get("deleted") or ())
        output.write_json("run.json", {"run_id": self.run_id, "collection": cfg.collection,
                                       "fingerprint": self.fingerprint, "plan": self.plan.counts(),
                                       "deleted": sorted(deleted), "config": cfg.public_dict()})
        return output

    def _take_released(self, released: list[str]) -> int:
        """A deleted document may have held text other documents only recorded a copy of
        (jobs/store/shared_text.py); those were marked pending (`released`). Unchanged ones are re-chunked
        in this run rather than the next, so the text is back in the index when this run ends. The plan
        keeps no unchanged file, so each is found again under the roots (a file changed since the freeze
        of a manifest stays out, as the plan left it)."""
        cfg, plan = self.cfg, self.plan
        candidates = sorted(set(released) - set(plan.not_as_frozen))
        planned = self.work.planned(candidates)
        stored = self.store.stored_documents(cfg.collection, [p for p in candidates if p not in planned])
        roots = roots_of(cfg.input.roots, cfg.input.manifest)
        moved = []
        for path, doc in sorted(stored.items()):
            uri = relocate(roots, path, self.storage) if doc.status == "pending" else None
            if uri is not None:
                moved.append(SourceFile(path, uri, SOURCE_TYPES[PurePosixPath(path).suffix.lower()],
                                        doc.source_size or 0, doc.content_sha256, doc.source_etag, hashed=False))
        if moved:
            # Documents new to this run count towards its progress; one it processed in an earlier round counts once.
            self.new_in_round = len(moved) - len(self.work.planned([f.source_path for f in moved], every_round=True))
            plan.unchanged -= len(moved)
            plan.retry += moved
            plan.hand_over(self.queue)
            log.info("%d unchanged documents re-chunked: they shared text only a replaced or deleted document held",
                     len(moved))
        return len(moved)

    def start(self) -> None:
        cfg, store, plan, run_id = self.cfg, self.store, self.plan, self.run_id
        self.documents = plan.processing
        self.in_process = runs_in_process(cfg, self.documents)  # a handful of documents: no Ray (jobs/in_process.py)
        # Before anything is recorded: a run that cannot read its inputs never starts.
        if self.documents and not self.in_process:
            from jobs import on_ray  # late: Ray's imports take seconds, which a small run in process does without

            self.on_ray = on_ray
            self.started_ray = on_ray.start(cfg, self.work.counts())
        output = self._write_run_json()
        store.start_run(run_id, cfg.collection, cfg.public_dict(), self.fingerprint, output.uri)
        self.result = IngestResult(run_id, cfg.collection, self.fingerprint, plan.counts(), output_dir=output.uri,
                                   not_as_frozen=plan.not_as_frozen)
        log.info("run %s: %s", run_id, ", ".join(f"{v} {k}" for k, v in plan.counts().items()))

        # The listing each file came with goes on its pending row; its commit keeps it (keep_listing).
        store.mark_pending_work(cfg.collection, run_id)
        writer = self.on_ray.ChunkDatasink if self.on_ray else DocumentWriter  # Ray's write tasks, or this process
        self.sink = writer(self.url, cfg.database.schema_name, self.coll, run_id, label=f"corpusmill ingest {run_id}",
                           share_text=cfg.database.shared_text == "once", batch_rows=cfg.sink.flush_rows,
                           batch_seconds=cfg.sink.flush_seconds, batch_documents=cfg.sink.flush_documents,
                           reconnect_seconds=cfg.database.reconnect_seconds,
                           parts=output.part_writer(), keep_listing=True, owner=store.owner_token(cfg.collection))

    def process(self) -> None:
        cfg, store, coll, sink = self.cfg, self.store, self.coll, self.sink
        # Vectors of texts the collection holds (unchanged chunks of an edited page, repeated blocks) are
        # reused, and those other collections embedded with the same model.
        self.known = vectors_to_reuse(store, self.url, cfg.database.schema_name, cfg.embedding, coll.embedding_model,
                                      coll.dimension, own=coll.chunk_table)
        # The fence's driver side: a run that another run took the collection from stops within seconds.
        # On Ray its job is cancelled (actors killed, tasks ended); in this process the main thread is
        # interrupted.
        watch = LeaseWatch(self.url, cfg.database.schema_name, cfg.collection, store.owner_token(cfg.collection))
        self.cancel = self.on_ray.JobCancel() if self.on_ray else None
        if self.cancel is not None:
            watch.on_lost(self.cancel)
        try:
            # Ray Data's own bars, when asked for, take the terminal: the progress then goes to the log.
            self.progress = progress = Progress(
                self.url, cfg.database.schema_name, cfg.collection, self.run_id, self.documents,
                cfg.sink.progress_seconds, live=False if self.on_ray and cfg.ray.progress_bars else None)
            with progress, watch:
                writers = self._rounds()
        except BaseException as exc:
            self._stopped(exc, watch.lost)
            raise
        _record_lost(store, coll, self.run_id, sink.stats, self.work, cfg.ray.lost_document_runs)
        self.output.fetch_parts()
        self.stage_stats["sink"] = {"documents": self.documents, "seconds": round(sink.stats.seconds, 3),
                                    "writers": writers, "transactions": sink.stats.transactions,
                                    "nodes": len(sink.stats.nodes), "in_process": self.in_process}
        self.stage_stats["stages"] = stage_summary(self.stage_stats, sink.stats.vectors)
        if self.started_ray:
            self.stopping.append(self.on_ray.stop())
        t_index = time.monotonic()
        self.result.index_built = store.ensure_indexes(coll, cfg.database)
        self.stage_stats["stages"]["index"] = {"built": self.result.index_built,
                                               "seconds": round(time.monotonic() - t_index, 3)}

    def abandon(self) -> None:
        """The run stopped after it was recorded and before it settled (Ctrl-C in an index build, the
        upkeep after the write): recorded aborted rather than `running` for good, where the database can
        still be told. What it committed stays; the same command resumes."""
        try:
            self.store.abandon_run(self.run_id, {"plan": self.plan.counts()})
        except Exception:  # the database itself may be what stopped the run
            log.debug("could not record the stopped run %s", self.run_id, exc_info=True)

    def keep_indexes(self) -> None:
        """A run with nothing to process leaves the search indexes built all the same: its first step may
        have analysed an older table's terms again (which drops BM25's indexes), or a load before it may
        have stopped ahead of its index builds."""
        self.result.index_built = self.store.ensure_indexes(self.coll, self.cfg.database)

    def _pipeline(self, run_cfg: JobConfig) -> tuple[dict, int]:
        """The current round's work items through the stages into the sink: (stage stats, writers)."""
        if self.on_ray:
            return self.on_ray.write_on_ray(run_cfg, self.work, self.storage, self.known, self.sink, self.output,
                                            self.url, self.cancel)
        return write_in_process(run_cfg, self.work.items("markdown"), self.work.items("excel"), self.storage,
                                self.known, self.sink), 1

    def _rounds(self) -> int:
        """The plan's documents through the stages, then the rounds after it; the sink's writers."""
        cfg, store, work, stage_stats = self.cfg, self.store, self.work, self.stage_stats
        stage_stats["pipeline"], writers = self._pipeline(cfg)
        # Updated documents may have let go of text others only copied (jobs/store/shared_text.py):
        # those are re-chunked now, so the run ends with every text in the index.
        for _ in range(REHOME_ROUNDS):
            released = store.released_documents(cfg.collection)
            work.begin_round()
            moved = self._take_released(released) if released else 0
            if not moved:
                break
            store.mark_pending_work(cfg.collection, self.run_id, since=work.since)
            self.progress.extend(self.new_in_round)
            self.result.rehomed += moved
            stage_stats["rehome"] = {"documents": self.result.rehomed, "pipeline": self._pipeline(cfg)[0]}
        # Documents this run lost that would now settle (lost in the runs before too) go through
        # once more, one to a batch: one that kills its worker then dies alone, and those only
        # lost beside it in its batch, run after run, commit instead of settling with it.
        settling = [doc["source_path"] for doc, settles in work.lost(cfg.ray.lost_document_runs) if settles]
        if settling:
            work.begin_round()
            log.info("%d document(s) lost in %d runs in a row: each processed once more, alone",
                     work.repeat(settling), cfg.ray.lost_document_runs)
            stage_stats["alone"] = {"documents": len(settling), "pipeline": self._pipeline(one_at_a_time(cfg))[0]}
        return writers

    def _stopped(self, exc: BaseException, lost: str | None) -> None:
        """The stages failed (`lost`: the fence's message when another run took the collection). Committed
        documents stay committed; the rest stay pending and the next run resumes them. When the database
        stopped it, the run ends with RunStopped; any other error goes on as it is. Either way run_ingest
        records it aborted (abandon)."""
        cause = OwnershipLost(lost) if lost else cause_of(exc)
        if database_stopped(cause):
            try:
                done = self.store.run_document_counts(self.cfg.collection, self.run_id)
                so_far = f"after {done['done'] + done['failed']} of {self.documents} documents"
            except Exception:  # the server is what failed: say what is known
                so_far = f"with some of {self.documents} documents committed"
            raise RunStopped(stop_message(self.run_id, so_far, cause)) from exc

    def settle(self) -> None:
        cfg, store, result, stats, plan = self.cfg, self.store, self.result, self.sink.stats, self.plan
        limit = min(cfg.chunking.max_tokens, token_counter(cfg.embedding.model).limit)
        index = self._measure_index(limit) if self.documents or plan.delete else None
        # The run's time includes its upkeep; the summary's last steps (the QA report) add to result.seconds below.
        result.seconds = time.monotonic() - self.started
        result.failures = stats.failures
        result.metrics = metrics = run_metrics(stats, plan.counts(), result.seconds)
        metrics["discovery"] = plan.discovery()  # links not followed: listed by the QA report
        metrics["stages"] = self.stage_stats | {"seconds_total": round(result.seconds, 2)}
        metrics["rehomed"] = result.rehomed
        metrics["token_limit"] = limit
        if index is not None:
            metrics["index"] = index
            result.gate_failures = check_gates(cfg.gates, index, metrics)
            metrics["gates"] = [asdict(g) for g in result.gate_failures]
            for warning in index.get("warnings", []):
                log.warning("index: %s", warning)
        self.output.write_json("qa/metrics.json", metrics)
        write_summary(self.output.qa_dir / "summary.md", metrics)
        status = "ok"
        failures = self._run_failures(stats.failures)
        if failures is not None:
            self.output.write_errors(failures)
        if stats.failures:
            status = "failed_files"
        elif result.gate_failures:
            status = "failed_gates"
        chunks = metrics["chunks"]
        store.finish_run(self.run_id, status, metrics["files"] | {
            "chunks": stats.chunks, "vectors": stats.vectors,
            "vectors_computed": chunks["vectors_computed"], "vectors_reused": chunks["vectors_reused"]},
                         metrics["stages"])
        result.totals = store.status(cfg.collection)

    def _run_failures(self, now: list[dict]) -> list[dict] | None:
        """What the run directory's errors.parquet lists after this attempt: this attempt's failures, and
        an earlier attempt's (a resumed run id) of documents no later attempt committed. A refusal a later
        attempt got past must leave the list, or a reload of the history (jobs/load.py) would leave out the
        version this run committed. None: nothing to write."""
        earlier = read_errors(self.output.uri, self.storage)
        if not earlier and not now:
            return None
        again = {f["source_path"] for f in now}
        # A refusal at commit stays whatever this attempt did with the file: the refused rows are in an
        # earlier attempt's parts, and only a commit by this run makes them stale.
        refused_again = {f["source_path"] for f in now if f["stage"] == "load"}
        left = [f for f in earlier if f["source_path"] not in (refused_again if f["stage"] == "load" else again)]
        committed = self.store.committed_in_run(self.cfg.collection, sorted({f["source_path"] for f in left}),
                                                self.run_id) if left else set()
        return [f for f in left if f["source_path"] not in committed] + list(now)

    def _measure_index(self, token_limit: int) -> dict:
        """The collection changed: measure what is now in the index, for the gates. Its cost is bounded
        whatever the collection's size (exact counts, bounded samples: index_metrics). A server restart
        after the write (the run's documents are in) must not fail the run here."""
        t_upkeep = time.monotonic()
        index = self.store.read(index_metrics, self.coll, token_limit=token_limit)
        index["shared_text"] = shared = self.store.shared_text_counts(self.coll)
        if shared["whole_copies"]:
            index["warnings"].append(
                f"{shared['whole_copies']} documents have nothing of their own stored: every chunk repeats "
                f"another document's text (copies or includes?): {', '.join(shared['whole_copy_paths'][:5])}"
                + (" …" if shared["whole_copies"] > 5 else ""))
        self.stage_stats["upkeep"] = {"seconds": round(time.monotonic() - t_upkeep, 3)}
        return index

    def report(self) -> None:
        run_id, output = self.run_id, self.output
        try:
            self.result.report = ((write_report(output.run_dir) if self.cfg.report else {})
                                  | write_discard_report(output.run_dir))
        except Exception:  # the run's data is committed; a broken plot must not turn it into a failure
            log.exception("could not write the QA report for %s (`corpusmill report --run-id %s` retries)",
                          run_id, run_id)
        try:
            output.publish("qa")  # a remote run directory gets the report (a local one has it already)
            output.drop_staged_parts()
        except Exception:
            log.exception("could not upload the QA report of %s to %s (`corpusmill report --run-id %s` retries)",
                          run_id, output.uri, run_id)
        self.result.seconds = time.monotonic() - self.started  # what the run took, to its last step: the time it reports
