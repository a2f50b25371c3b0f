"""Actor pools a Ray cluster cannot hold (jobs/cluster_fit.py): said before the run starts, not waited on for
ever. The arithmetic on the shipped configs, then a local Ray asked for a GPU it does not have."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile

import psycopg
import pytest

from jobs.cluster_fit import pools, shortfall, task_cpus
from jobs.config import load_config
from jobs.embed.layout import embed_layout
from tests.conftest import COPIES, REPO, big_corpus, write_config
from tests.test_run_output import OWN_RAY


def _missing(config: str, nodes: list[dict], documents: int = 1000) -> str | None:
    cfg = load_config(REPO / "configs" / config)
    cluster = {"CPU": sum(n.get("CPU", 0) for n in nodes), "GPU": sum(n.get("GPU", 0) for n in nodes)}
    actors, workers = embed_layout(cfg, cluster, int(cluster["CPU"]), documents, local=len(nodes) == 1)
    return shortfall(pools(cfg, actors, workers), nodes, task_cpus(cfg))


def test_the_shipped_configs_fit_the_machines_they_are_for():
    assert _missing("local.yaml", [{"CPU": 4}]) is None
    assert _missing("gpu.yaml", [{"CPU": 16, "GPU": 1}]) is None
    assert _missing("gpu.yaml", [{"CPU": 2}, {"CPU": 16, "GPU": 1}]) is None  # a CPU head beside a GPU worker


def test_gpu_actors_on_a_cluster_without_a_gpu_name_the_stage_and_its_keys():
    missing = _missing("gpu.yaml", [{"CPU": 8}])
    assert missing is not None
    assert "no node has 1 CPU and 0.125 GPU for one sentences actor" in missing
    assert "no GPU" in missing and "sentences.resources: pool_size, num_cpus, num_gpus" in missing


def test_a_pool_larger_than_the_cluster_counts_what_all_pools_need_together():
    cfg = load_config(REPO / "configs" / "local.yaml")
    big = cfg.sentences.resources.model_copy(update={"pool_size": 6})
    cfg = cfg.model_copy(update={"sentences": cfg.sentences.model_copy(update={"resources": big})})
    missing = shortfall(pools(cfg, 1, 1), [{"CPU": 4}], task_cpus(cfg))
    assert missing == ("Ray cannot start this run's actor pools: together they and one parse/chunk task need 7.5 CPUs, "
                       "where the cluster has 4 CPUs and no GPU in 1 node (sentences: 6 × 1 CPU (sentences.resources: "
                       "pool_size, num_cpus, num_gpus); embedding: 1 × 1 CPU (embedding.resources: pool_size, "
                       "num_cpus, num_gpus; embedding.workers_per_actor); a task: 0.5 CPU, ray.parse / ray.chunk / "
                       "ray.excel)")


def test_an_actor_bigger_than_any_node_is_named_even_when_the_total_would_do():
    missing = shortfall([*pools(load_config(REPO / "configs" / "local.yaml"), 1, 4)], [{"CPU": 3}, {"CPU": 3}], 1)
    assert "no node has 4 CPUs for one embedding actor" in missing


@pytest.mark.slow
def test_a_local_ray_without_a_gpu_refuses_gpu_actors_before_the_run_and_stops_its_ray(tmp_path, corpus, cm_home,
                                                                                        pg_url):
    """gpu.yaml's sentence actors (a GPU share each) on this machine's local Ray, which has no GPU: Ray Data
    would wait for them for ever. The run is refused (exit 2) before it is recorded, and the Ray it started
    is down when ingest returns (an API caller's process goes on)."""
    big = big_corpus(corpus, tmp_path / "big", copies=3)  # 18 documents: a run on Ray
    cfg = write_config(tmp_path / "g.yaml", "fit_no_gpu", [big], ray__num_cpus=2,
                       sentences__resources__num_gpus=0.125, **COPIES)
    ray_tmp = tempfile.mkdtemp(prefix="cmfit-", dir="/tmp")  # Unix socket paths must stay short
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_MODE")}
    env.update(CORPUSMILL_HOME=str(cm_home), RAY_TMPDIR=ray_tmp, TOKENIZERS_PARALLELISM="false")
    try:
        proc = subprocess.run([sys.executable, "-c", OWN_RAY, str(cfg), ray_tmp], env=env, capture_output=True,
                              text=True, timeout=300)
    finally:
        subprocess.run(["pkill", "-f", ray_tmp], capture_output=True)
        shutil.rmtree(ray_tmp, ignore_errors=True)
    own = json.loads(proc.stdout.strip().splitlines()[-1])
    assert own == {"code": 2, "ray_up": False, "left": []}, proc.stderr[-3000:]
    assert "no node has 1 CPU and 0.125 GPU for one sentences actor" in proc.stderr
    with psycopg.connect(pg_url) as conn:
        runs = conn.execute("SELECT count(*) FROM corpusmill.runs WHERE collection = 'fit_no_gpu'").fetchone()[0]
    assert runs == 0
