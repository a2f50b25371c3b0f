import pyarrow as pa
import pytest

from jobs.adapter import Stage, _actor_pool
from jobs.config import ResourcesConfig


class _Thing:
    def __call__(self, rows):
        return rows


def test_a_stage_with_two_calls_per_actor_runs_them_at_once_with_one_batch_in_flight_per_call():
    pool = _actor_pool(Stage("embed", _Thing, None, ResourcesConfig(pool_size=1, tasks_in_flight=1), calls_per_actor=2))
    assert pool.min_size == pool.max_size == 1
    assert pool.max_concurrent_calls_per_actor == 2 and pool.enable_true_multi_threading
    assert pool.max_tasks_in_flight_per_actor == 2


def test_a_plain_actor_stage_keeps_one_call_and_rays_default_queue():
    pool = _actor_pool(Stage("sentences", _Thing, None, ResourcesConfig(pool_size=3)))
    assert pool.min_size == 3 and pool.max_tasks_in_flight_per_actor is None
    assert not pool.enable_true_multi_threading


class _Shout:
    """An actor-style stage: built once with its kwargs, then called on rows."""

    def __init__(self, suffix):
        self.suffix = suffix

    def __call__(self, rows):
        return [r | {"text": r["text"].upper() + self.suffix, "extra": 1} for r in rows]


def _words(rows, *, sep):
    return [{"doc": r["doc"], "word": w} for r in rows for w in r["text"].split(sep)]


def test_fused_stages_run_in_order_on_rows_shaped_like_their_arrow_round_trip():
    import pyarrow as pa

    from jobs.adapter import Chain, fuse

    first = pa.schema([pa.field("doc", pa.string()), pa.field("text", pa.string()), pa.field("note", pa.string())])
    second = pa.schema([pa.field("doc", pa.string()), pa.field("word", pa.string())])
    stage = fuse([Stage("shout", _Shout, first, ResourcesConfig(), {"suffix": "!"}),
                  Stage("words", _words, second, ResourcesConfig(), {"sep": " "})],
                 ResourcesConfig(pool_size=1, batch_size=8))
    assert stage.name == "shout+words" and stage.is_actor and stage.output_schema == second
    assert stage.resources.batch_size == 8
    chain = stage.fn(**stage.kwargs)
    assert isinstance(chain, Chain)
    assert chain([{"doc": "a", "text": "hi there"}]) == [{"doc": "a", "word": "HI"}, {"doc": "a", "word": "THERE!"}]
    # Between stages a row holds exactly its schema's fields, as after Arrow: `extra` dropped, `note` None.
    assert Chain((stage.kwargs["stages"][0],))([{"doc": "b", "text": "x"}]) == [{"doc": "b", "text": "X!", "note": None}]


_LOST_WORKER = """
import json, os, sys
import pyarrow as pa
import ray, ray.data
from jobs import adapter
from jobs.config import ResourcesConfig

ray.init(address=os.environ["RAY_ADDRESS"], log_to_driver=False)
schema = pa.schema([pa.field("doc", pa.string())])

def die_on_poison(rows):  # the worker process dies, as under an OOM kill: no exception to catch
    if any(r["doc"] == "poison" for r in rows):
        os._exit(1)
    return rows

class DieOnPoison:
    def __call__(self, rows):
        return die_on_poison(rows)

fn = DieOnPoison if sys.argv[1] == "actor" else die_on_poison
ds = ray.data.from_items([{"doc": d} for d in ["a", "b", "poison", "c"]], override_num_blocks=4)
# One block in flight per actor: a dying actor fails every call queued on it (a fault costs the documents in
# flight, which the sink records as lost), so with more in flight `c` could die alongside `poison`.
res = ResourcesConfig(batch_size=1, pool_size=1, tasks_in_flight=1) if fn is DieOnPoison else ResourcesConfig(batch_size=1)
ds = adapter.apply(ds, adapter.Stage("die", fn, schema, res), retries=1)
ds.context.max_errored_blocks = -1  # on the job's own context, as jobs.on_ray.build_dataset sets it
assert ray.data.DataContext.get_current().max_errored_blocks != -1  # the process-wide one is left alone
print("RESULT " + json.dumps(sorted(r["doc"] for r in ds.take_all())))
"""


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["task", "actor"])
def test_a_block_whose_worker_dies_each_time_is_dropped_after_its_retries_and_the_rest_arrive(kind, ray_address):
    import json
    import os
    import subprocess
    import sys

    env = dict(os.environ, RAY_ADDRESS=ray_address)
    out = subprocess.run([sys.executable, "-c", _LOST_WORKER, kind], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    # The run then records the missing document (`LostDocument`) for the next run: tests/test_ingest.py.
    result = next(line for line in out.stdout.splitlines() if line.startswith("RESULT "))
    assert json.loads(result.removeprefix("RESULT ")) == ["a", "b", "c"]


def test_a_value_arrow_cannot_take_fails_its_own_document_only():
    from jobs.adapter import to_table
    from jobs.rows import CHUNK_SCHEMA

    def row(doc, text):
        return {"doc_id": doc, "collection": "c", "source_path": f"{doc}.md", "source_type": "markdown",
                "pipeline_fingerprint": "fp", "run_id": "r", "content_sha256": "s", "text": text,
                "row_kind": "chunk", "doc_rows": 1, "seq": 0}

    # A lone surrogate (a workbook's `_xD800_`, a "\ud800" in YAML) is not UTF-8: Arrow refuses the batch.
    table = to_table([row("a", "fine"), row("b", "bad \ud800"), row("c", "fine too")], CHUNK_SCHEMA, "excel")
    got = {r["doc_id"]: r for r in table.to_pylist()}
    assert got["a"]["text"] == "fine" and got["c"]["text"] == "fine too"
    assert got["b"]["row_kind"] == "error" and got["b"]["error_stage"] == "excel"
    assert got["b"]["error_class"] == "UnicodeEncodeError" and got["b"]["text"] is None


def _chunk(doc, seq, n):
    return {"doc_id": doc, "collection": "c", "source_path": f"{doc}.md", "source_type": "markdown",
            "pipeline_fingerprint": "fp", "run_id": "r", "content_sha256": "s", "text": f"{doc} {seq}",
            "row_kind": "chunk", "doc_rows": n, "seq": seq}


def test_a_bug_in_a_stage_on_ray_comes_back_as_rows_that_stop_the_run_not_as_a_lost_block():
    """Raised, it would fail the block, which the job tolerates as a lost worker (LostDocument, forever)."""
    from jobs.adapter import _run
    from jobs.rows import CHUNK_SCHEMA, DOC_SCHEMA, WORK_SCHEMA

    def buggy(rows):
        return [r["missing"] for r in rows]

    # Chunk rows (the embed stage's input) keep their place in their document; work rows become one row each.
    chunks = pa.Table.from_pylist([_chunk("a", 0, 2), _chunk("a", 1, 2), _chunk("b", 0, 1)], schema=CHUNK_SCHEMA)
    out = _run(buggy, chunks, CHUNK_SCHEMA, "embed").to_pylist()
    assert [(r["doc_id"], r["seq"], r["doc_rows"], r["row_kind"]) for r in out] == [
        ("a", 0, 2, "error"), ("a", 1, 2, "error"), ("b", 0, 1, "error")]
    assert {r["error_class"] for r in out} == {"InternalError"} and {r["error_stage"] for r in out} == {"embed"}
    assert out[0]["error_message"].startswith("stage embed: KeyError: 'missing' (at test_adapter.py:")
    work = pa.Table.from_pylist([{"doc_id": "a", "source_path": "a.md", "collection": "c", "source_type": "markdown",
                                  "pipeline_fingerprint": "fp", "run_id": "r", "content_sha256": "s"}], schema=WORK_SCHEMA)
    (row,) = _run(buggy, work, CHUNK_SCHEMA, "parse_markdown+sentences+chunk").to_pylist()
    assert (row["doc_id"], row["row_kind"], row["doc_rows"], row["error_class"]) == ("a", "error", 1, "InternalError")
    (doc,) = _run(buggy, work, DOC_SCHEMA, "sentences").to_pylist()
    assert doc["error_class"] == "InternalError" and doc["error_stage"] == "sentences"

    def machine_fault(rows):
        raise MemoryError

    with pytest.raises(MemoryError):  # not a bug: the block fails, and the run records its documents lost
        _run(machine_fault, chunks, CHUNK_SCHEMA, "embed")


def test_a_value_of_the_wrong_type_is_the_stages_bug_not_its_documents():
    from jobs.adapter import to_table
    from jobs.rows import CHUNK_SCHEMA

    with pytest.raises(pa.ArrowInvalid):
        to_table([_chunk("a", 0, 1), _chunk("b", 0, 1) | {"seq": "zero"}], CHUNK_SCHEMA, "chunk")
