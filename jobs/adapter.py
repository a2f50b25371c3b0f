"""The one place that maps plain-Python stages onto Ray Data's `map_batches`.

A stage is either a function `rows -> rows` (run as Ray tasks) or a class whose `__init__` loads
its model once and whose `__call__(rows) -> rows` handles a batch (run in a fixed actor pool). Rows
are lists of dicts; the adapter converts Arrow batches to and from them with the stage's declared
output schema, so stages know nothing of Ray or Arrow. A small run uses the same Chain and
to_table without Ray (jobs/in_process.py).

A stage turns a document's data fault into that document's error row and raises on a bug
(jobs.errors.is_bug). On Ray a raised exception would fail the block, which the job tolerates as a lost
worker (jobs.on_ray.build_dataset), so the bug would pass for lost data: the stage's host here turns
it into error rows of class `InternalError` for the batch's documents instead, which the writers
recognise and stop the run on (exit 4; jobs/store/writers.py).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from jobs.config import ResourcesConfig
from jobs.errors import InternalError, bug_report, is_bug
from jobs.rows import doc_marker, error_fields, error_row


@dataclass(frozen=True)
class Stage:
    name: str
    fn: Callable[..., Any]  # a function over rows, or a class built once per actor
    output_schema: pa.Schema
    resources: ResourcesConfig
    kwargs: dict[str, Any] = field(default_factory=dict)
    calls_per_actor: int = 1  # >1: the actor's class is thread-safe and runs that many batches at once

    @property
    def is_actor(self) -> bool:
        return isinstance(self.fn, type)


def to_table(rows: list[dict], schema: pa.Schema, stage: str = "") -> pa.Table:
    """The batch as Arrow. A value Arrow cannot take (text that is not UTF-8, a number out of range)
    fails only its own document: it becomes that document's error row, and the rest of the batch goes
    on (a failing conversion would otherwise fail the block, and with it every document in it)."""
    try:
        return pa.Table.from_pylist(rows, schema=schema)
    except (pa.ArrowException, UnicodeError, TypeError, ValueError, OverflowError):
        if not rows or any("doc_id" not in r for r in rows):
            raise
    by_doc: dict[str, list[dict]] = {}
    for row in rows:  # every row of a document comes from the same stage call, so from this batch
        by_doc.setdefault(row["doc_id"], []).append(row)
    tables = []
    for doc_rows in by_doc.values():
        try:
            tables.append(pa.Table.from_pylist(doc_rows, schema=schema))
        except (pa.ArrowException, UnicodeError, TypeError, ValueError, OverflowError) as exc:
            if is_bug(exc):  # a value of the wrong type is the stage's bug, not the document's
                raise
            tables.append(pa.Table.from_pylist([error_row(doc_rows[0], stage or "convert", exc)], schema=schema))
    return pa.concat_tables(tables)


def bug_rows(rows: list[dict], stage: str, exc: BaseException, schema: pa.Schema) -> pa.Table | None:
    """The batch `rows` as error rows of class `InternalError` that carry the bug `exc` to the writers (module
    docstring), in `schema`, the stage's output: a chunk row keeps its place in its document, a work or
    document row becomes its document's one row. None when the rows are not documents' (a reader's ranges)."""
    if not rows or any("doc_id" not in r for r in rows):
        return None
    fields = error_fields(stage, exc) | {"error_class": InternalError.__name__,
                                         "error_message": f"stage {stage}: {bug_report(exc)}"[:2000]}
    if "row_kind" not in schema.names:
        out = [r | fields for r in rows]
    else:
        out = [r | {"row_kind": "error"} | fields if "row_kind" in r else doc_marker(r, "error", **fields) for r in rows]
    return pa.Table.from_pylist(out, schema=schema)


def _run(stage: Callable[[list[dict]], list[dict]], batch: pa.Table, schema: pa.Schema, name: str) -> pa.Table:
    """A stage over one Ray batch; a bug comes back as bug_rows, to stop the run rather than lose the block."""
    rows = batch.to_pylist()
    try:
        return to_table(stage(rows), schema, name)
    except Exception as exc:
        carried = bug_rows(rows, name, exc, schema) if is_bug(exc) else None
        if carried is None:
            raise
        return carried


class Chain:
    """Stages run one after another inside one actor, for a path whose stages are cheap next to the
    cost of moving rows between processes. Rows pass between them as Python dicts with the fields the
    Arrow round trip would leave (every field of the stage's schema, absent ones None, nothing more).
    Values are not converted to the schema's types: the Markdown rows hold strings, ints and lists of
    dicts with every field of their struct type (jobs.rows.SECTION_TYPE, UNIT_TYPE), which the round trip
    leaves as they are."""

    def __init__(self, stages: tuple[Stage, ...]):
        self._steps = [(s.fn(**s.kwargs) if s.is_actor else functools.partial(s.fn, **s.kwargs),
                        s.output_schema.names) for s in stages]

    def __call__(self, rows: list[dict]) -> list[dict]:
        for step, names in self._steps:
            rows = [{name: row.get(name) for name in names} for row in step(rows)]
        return rows


def fuse(stages: list[Stage], resources: ResourcesConfig) -> Stage:
    """One actor stage that runs `stages` in order with `resources`. Its Ray operator is named
    `a+b+c` after them, so stats still name every stage."""
    return Stage("+".join(s.name for s in stages), Chain, stages[-1].output_schema, resources,
                 {"stages": tuple(stages)})


class _ActorHost:
    """Builds the stage inside the actor (model load happens here, once) and converts batches."""

    def __init__(self, factory: Callable[[], Any], schema: pa.Schema, name: str = ""):
        self._stage = factory()
        self._schema, self._name = schema, name

    def __call__(self, batch: pa.Table) -> pa.Table:
        return _run(self._stage, batch, self._schema, self._name)


def _actor_pool(stage: Stage):
    """A fixed pool; `tasks_in_flight` counts per concurrent call. Concurrent calls need an
    ActorPoolStrategy that takes `max_concurrent_calls_per_actor` and `enable_true_multi_threading`
    (Ray 2.60 does); with an older Ray the calls run one at a time, which is only slower."""
    import ray.data  # late: a small run in process uses Stage, Chain and to_table without Ray

    res, calls = stage.resources, stage.calls_per_actor
    kwargs = {"size": res.pool_size or 1,
              "max_tasks_in_flight_per_actor": res.tasks_in_flight * calls if res.tasks_in_flight else None}
    takes = inspect.signature(ray.data.ActorPoolStrategy).parameters
    if calls > 1 and {"max_concurrent_calls_per_actor", "enable_true_multi_threading"} <= set(takes):
        kwargs |= {"max_concurrent_calls_per_actor": calls, "enable_true_multi_threading": True}
    return ray.data.ActorPoolStrategy(**kwargs)


def apply(ds, stage: Stage, retries: int | None = None):
    """Append `stage` to the Ray dataset `ds` with its declared resources. The Ray operator is named
    after the stage, so progress bars and stats say `sentences`, not a wrapper's name.

    `retries`: how often a task (or an actor call) is run again after its worker process died. Ray Data
    retries for ever by default, so a document that reliably kills its worker (an OOM) would stall the
    run; bounded, the block fails and the job records its documents (see jobs.on_ray.build_dataset)."""
    import ray.data  # late: see _actor_pool

    res = stage.resources
    common = dict(
        batch_size=res.batch_size,
        batch_format="pyarrow",
        num_cpus=res.num_cpus,
        num_gpus=res.num_gpus or None,
        zero_copy_batch=True,
    )
    if retries is not None:
        # An actor that died is restarted (the pool stays whole); the call it ran is retried `retries` times.
        common |= {"max_restarts": -1, "max_task_retries": retries} if stage.is_actor else {"max_retries": retries}
    if stage.is_actor:
        host = type(stage.name, (_ActorHost,), {"__module__": __name__})
        return ds.map_batches(
            host,
            fn_constructor_kwargs={
                "factory": functools.partial(stage.fn, **stage.kwargs),
                "schema": stage.output_schema,
                "name": stage.name,
            },
            compute=_actor_pool(stage),
            **common,
        )

    fn, schema, kwargs, name = stage.fn, stage.output_schema, stage.kwargs, stage.name

    def task(batch: pa.Table) -> pa.Table:
        return _run(functools.partial(fn, **kwargs), batch, schema, name)

    task.__name__ = task.__qualname__ = stage.name
    compute = ray.data.TaskPoolStrategy(size=res.pool_size) if res.pool_size else None
    return ds.map_batches(task, compute=compute, **common)
