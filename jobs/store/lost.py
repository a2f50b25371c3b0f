"""Documents a run lost: the pipeline never returned them (a block failed past its retries, its worker
killed each time it ran). Each is recorded failed and retried by the next run; one lost in
`ray.lost_document_runs` runs in a row on the same content and pipeline settles (issue 42): it most likely
kills its worker, and a run that read it again would only lose it again. Before settling, a run processes
such documents once more, each alone (jobs/ingest.py one_at_a_time), so that documents only lost beside it
in its batch are not settled with it.
"""

from __future__ import annotations

import logging

from jobs.store.pgvector import PgStore
from jobs.store.sink_stats import SinkStats
from jobs.store.work_items import WorkItems

log = logging.getLogger(__name__)


def record_lost(store: PgStore, coll, run_id: str, stats: SinkStats, work: WorkItems | None = None,
                settle_runs: int = 0) -> None:
    """Documents of this run still pending after the write: the pipeline never returned them (a block that
    failed past its retries, e.g. a worker killed each time it ran). Recorded failed; the next run
    retries them, unless this is the `settle_runs`-th run in a row that lost one on the same content and
    pipeline (ray.lost_document_runs; WorkItems.lost): that one most likely kills its worker, and stays
    failed until it changes or `ingest --retry-failed`, as a content failure does."""
    lost = work.lost(settle_runs) if work is not None and settle_runs else [
        (doc, False) for doc in store.pending_of_run(coll.name, run_id)]
    for doc, settled in lost:
        if settled:
            runs = f"in {settle_runs} runs in a row" if settle_runs > 1 else "in this run"
            message = (f"its worker process died each time it was processed {runs}, the last time alone (past its "
                       "retries): it is not read again until it changes or `ingest --retry-failed`")
        else:
            message = ("the pipeline returned no rows for this file (its block failed past its retries, e.g. a "
                       "worker killed each time it ran); it will be retried")
        store.record_failure(coll.name, doc, run_id, "pipeline", "LostDocument", message, retryable=not settled)
        stats.docs_failed += 1
        stats.failures.append({"source_path": doc["source_path"], "stage": "pipeline", "error_class": "LostDocument",
                               "message": message})
    if any(settled for _, settled in lost):
        log.warning("%d document(s) lost in %d runs in a row are recorded failed until they change (`corpusmill "
                    "status` lists them; `ingest --retry-failed` reads them again)",
                    sum(settled for _, settled in lost), settle_runs)
