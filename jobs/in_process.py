"""Small runs in this process: the ingest's stages without Ray (#20).

A run of a handful of documents (an edit) would spend most of its wall time starting a local Ray, its
workers and actors, each importing torch and loading the models again. Below
`ray.in_process_max_documents` documents, on a local run (no RAY_ADDRESS) with no GPU asked for, the
same stage specs (jobs/pipeline.py) run here one batch at a time: parse, sentences and chunk as Ray's
fused Markdown actor runs them (jobs/adapter.Chain), then the Embedder (one single-threaded encoder per
core, as a local Ray's actor has), and the batches go to the DocumentWriter that Ray's write tasks run
(jobs/store/writers.py), called here: documents commit whole with their checkpoint rows and Parquet
parts, as on Ray. Nothing here imports Ray, whose imports alone take longer than such a run's work.

A batch that raises a bug (jobs.errors.is_bug) stops the run: what was committed stays, the rest stays
pending, and the exception reaches the CLI as it was raised (exit 4, its traceback saved). Any other
exception (the stages turn a document's data faults into error rows, so this is a fault of the machine:
memory, a file system) drops the batch as Ray drops a block that failed past its retries: its documents
stay pending, the run records them `LostDocument` and the next run retries them.
"""

from __future__ import annotations

import logging
import os
import time

from jobs.adapter import Chain, to_table
from jobs.config import JobConfig
from jobs.errors import is_bug
from jobs.pipeline import embed_stage, excel_stage, markdown_stages
from jobs.rows import CHUNK_SCHEMA
from jobs.sources.storage import StorageOptions
from jobs.store.known_vectors import KnownVectors
from jobs.store.writers import DocumentWriter

log = logging.getLogger(__name__)


def runs_in_process(cfg: JobConfig, documents: int) -> bool:
    """Whether a run of `documents` runs here (module docstring); a cluster joined always gets the job."""
    return (0 < documents <= cfg.ray.in_process_max_documents and not os.environ.get("RAY_ADDRESS")
            and not cfg.sentences.resources.num_gpus and not cfg.embedding.resources.num_gpus)


def write_in_process(cfg: JobConfig, md_items: list[dict], xl_items: list[dict], storage: StorageOptions | None,
                     known: KnownVectors | None, sink: DocumentWriter) -> dict:
    """Run the stages over the work items and commit through `sink`. Returns per-stage rows and seconds
    in the shape of jobs.on_ray.operator_stats, so the run's stage summary reads the same."""
    emb = cfg.embedding
    workers = emb.workers_per_actor  # `auto`: one encoder per torch_threads cores, as a local Ray's actor
    if workers == "auto":
        workers = max(1, (os.cpu_count() or 1) // (emb.torch_threads or 1))
    spent: dict[str, dict] = {}
    branches = []
    if md_items:
        stages = markdown_stages(cfg, storage)
        branches.append(("+".join(s.name for s in stages), Chain(tuple(stages)), md_items,
                         cfg.sentences.resources.batch_size))
    if xl_items:
        stage = excel_stage(cfg, storage)
        branches.append((stage.name, Chain((stage,)), xl_items, cfg.ray.excel.batch_size))
    embed = Chain((embed_stage(cfg, emb.resources, workers, known),))
    log.info("%d documents: run in this process (ray.in_process_max_documents %d), %d encoder worker(s)",
             len(md_items) + len(xl_items), cfg.ray.in_process_max_documents, workers)

    def timed(name: str, step, rows: list[dict]) -> list[dict]:
        started = time.monotonic()
        out = step(rows)
        entry = spent.setdefault(name, {"rows": 0, "task_seconds": 0.0})
        entry["rows"] += len(out)
        entry["task_seconds"] += time.monotonic() - started
        return out

    bugs: list[Exception] = []

    def blocks():
        for name, chain, items, batch in branches:
            for i in range(0, len(items), max(1, batch)):
                try:
                    rows = timed("embed", embed, timed(name, chain, items[i:i + batch]))
                    table = to_table(rows, CHUNK_SCHEMA, "embed")
                except Exception as exc:
                    if is_bug(exc):  # raised here it would reach the writer, which reports a task's faults
                        bugs.append(exc)
                        return
                    log.exception("a batch of %d documents failed; they stay pending for the next run",
                                  len(items[i:i + batch]))
                    continue
                yield table

    sink.on_write_start()
    stats = sink.write(blocks(), None)
    if bugs:
        raise bugs[0]
    sink.complete([stats])
    for entry in spent.values():
        entry["task_seconds"] = round(entry["task_seconds"], 3)
        entry["rows_per_task_second"] = round(entry["rows"] / entry["task_seconds"], 1) if entry["task_seconds"] else None
    return spent
