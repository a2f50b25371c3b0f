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
