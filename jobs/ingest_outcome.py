"""What an ingest run ends with (jobs/ingest.py): its IngestResult and the per-stage summary the runs table
keeps, or, when the database stopped it, the one line of RunStopped that says how far it got and how to
resume. Kept apart from the run's steps so that jobs/ingest.py reads as the steps alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import psycopg

from jobs.errors import UserError
from jobs.store import faults
from jobs.store.connection import DatabaseUnavailable
from jobs.store.locks import CollectionBusy, OwnershipLost
from jobs.store.writers import WriterFailed


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


def cause_of(exc: BaseException) -> BaseException:
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


def database_stopped(cause: BaseException) -> bool:
    """Whether the database stopped the run (gone, its collection taken, a statement failed there), rather
    than the run's own code: the run then ends with RunStopped's one line, not a traceback."""
    return isinstance(cause, (DatabaseUnavailable, CollectionBusy, psycopg.Error)) or getattr(cause, "database", False)


def stop_message(run_id: str, so_far: str, cause: BaseException) -> str:
    """RunStopped's line: what stopped run `run_id` (`so_far`: how many documents it had done) and what to do."""
    what = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
    if isinstance(cause, OwnershipLost):
        return f"run {run_id} stopped {so_far}: {what}"
    if not getattr(cause, "resumable", faults.resumable(cause)):  # the same batches would fail again
        return f"run {run_id} stopped {so_far}: {what}" + (
            "" if isinstance(cause, WriterFailed) else f". Every committed document is kept; {faults.advice(cause)}")
    return (f"run {run_id} stopped {so_far}: {what}. Every committed document is kept; run the same command again "
            f"to resume (the rest are still pending)")


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
