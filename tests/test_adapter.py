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
