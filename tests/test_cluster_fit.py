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

from jobs.cluster_fit import Feed, feed, pools, shortfall
from jobs.config import load_config
from jobs.embed.layout import embed_layout
from tests.conftest import COPIES, REPO, big_corpus, write_config
from tests.test_run_output import OWN_RAY

MD = {"markdown": 24}


def _cfg(config: str, **resources):
    cfg = load_config(REPO / "configs" / config)
    for section, values in resources.items():
        part = getattr(cfg, section)
        cfg = cfg.model_copy(update={section: part.model_copy(update={
            "resources": part.resources.model_copy(update=values)})})
    return cfg


def _missing(cfg, nodes: list[dict], counts: dict = MD, local: bool = True) -> str | None:
    """What check_fits finds, as jobs/on_ray.py computes it (fused Markdown on a local CPU Ray)."""
    from jobs.on_ray import fuse_markdown

    cluster = {"CPU": sum(n.get("CPU", 0) for n in nodes), "GPU": sum(n.get("GPU", 0) for n in nodes)}
    actors, workers = embed_layout(cfg, cluster, int(cluster["CPU"]), sum(counts.values()), local=local)
    return shortfall(pools(cfg, actors, workers, bool(counts.get("markdown"))), nodes,
                     feed(cfg, counts, fuse_markdown(cfg, local)))


def test_the_shipped_configs_fit_the_machines_they_are_for():
    assert _missing(_cfg("local.yaml"), [{"CPU": 4}]) is None
    assert _missing(_cfg("local.yaml"), [{"CPU": 2}]) is None  # fused: nothing feeds the pools, they may fill it
    assert _missing(_cfg("gpu.yaml"), [{"CPU": 16, "GPU": 1}], {"markdown": 100_000}, local=False) is None
    assert _missing(_cfg("gpu.yaml"), [{"CPU": 8, "GPU": 1}], {"markdown": 100_000}) is None  # auto: CPUs too
    assert _missing(_cfg("gpu.yaml"), [{"CPU": 2}, {"CPU": 16, "GPU": 1}], local=False) is None


def test_gpu_actors_on_a_ray_without_a_gpu_name_the_stage_and_its_keys():
    missing = _missing(_cfg("gpu.yaml"), [{"CPU": 8}])
    assert missing is not None
    assert "no node has 1 CPU and 0.125 GPU for one sentences actor" in missing
    assert "no GPU" in missing and "sentences.resources: pool_size, num_cpus, num_gpus" in missing


def test_sentence_actors_of_a_run_without_markdown_are_not_counted():
    # An Excel-only corpus under a config whose sentence actors want a GPU: no sentence actor is ever made.
    assert _missing(_cfg("gpu.yaml"), [{"CPU": 8}], {"excel": 18}) == _missing(
        _cfg("gpu.yaml", sentences={"num_gpus": 0}), [{"CPU": 8}], {"excel": 18})
    assert "sentences" not in (_missing(_cfg("gpu.yaml"), [{"CPU": 8}], {"excel": 18}) or "")


def test_pools_that_leave_no_cpu_to_the_tasks_feeding_them_are_named_with_those_tasks():
    cfg = _cfg("local.yaml", sentences={"pool_size": 6})
    assert _missing(cfg, [{"CPU": 4}]) is None  # fused: a pool bigger than the machine only runs fewer actors
    missing = _missing(cfg, [{"CPU": 4}], {"markdown": 24, "excel": 2})
    assert missing == ("Ray cannot run this job's actor pools: its actors would hold every CPU the tasks that feed "
                       "them need: the pools and one such task (0.5 CPU, ray.excel) need 7.5 CPUs, where the cluster "
                       "has 4 CPUs and no GPU in 1 node (sentences: 6 × 1 CPU (sentences.resources: pool_size, "
                       "num_cpus, num_gpus); embedding: 1 × 1 CPU (embedding.resources: pool_size, num_cpus, "
                       "num_gpus; embedding.workers_per_actor))")


def test_what_feeds_the_pools():
    cfg = _cfg("local.yaml")
    assert feed(cfg, {"markdown": 24}, fused=True) == Feed()
    assert feed(cfg, {"markdown": 24}, fused=False) == Feed(0.5, "ray.parse / ray.chunk")
    assert feed(cfg, {"markdown": 5000}, fused=True) == Feed(0.25, "ray.driver_items_max")
    assert feed(cfg, {"excel": 3}, fused=True).keys == "ray.excel"


def test_an_actor_bigger_than_any_node_is_named_even_when_the_total_would_do():
    missing = shortfall(pools(_cfg("local.yaml"), 1, 4), [{"CPU": 3}, {"CPU": 3}], Feed())
    assert "no node has 4 CPUs for one embedding actor" in missing


def _ingest_on_its_own_ray(cfg, cm_home) -> tuple[dict, str]:
    """`ingest --config cfg` without RAY_ADDRESS (a local Ray of its own, in a private temp dir): what
    tests.test_run_output.OWN_RAY prints (exit code, Ray still up, processes left) and its stderr."""
    ray_tmp = tempfile.mkdtemp(prefix="cmfit-", dir="/tmp")  # Unix socket paths must stay short
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_MODE")}
    env.update(CORPUSMILL_HOME=str(cm_home), RAY_TMPDIR=ray_tmp, TOKENIZERS_PARALLELISM="false")
    try:
        proc = subprocess.run([sys.executable, "-c", OWN_RAY, str(cfg), ray_tmp], env=env, capture_output=True,
                              text=True, timeout=600)
    finally:
        subprocess.run(["pkill", "-f", ray_tmp], capture_output=True)
        shutil.rmtree(ray_tmp, ignore_errors=True)
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


@pytest.mark.slow
def test_a_local_ray_without_a_gpu_refuses_gpu_actors_before_the_run_and_stops_its_ray(tmp_path, corpus, cm_home,
                                                                                        pg_url):
    """gpu.yaml's sentence actors (a GPU share each) on this machine's local Ray, which has no GPU: Ray Data
    would wait for them for ever. The run is refused (exit 2) before it is recorded, and the Ray it started
    is down when ingest returns (an API caller's process goes on)."""
    big = big_corpus(corpus, tmp_path / "big", copies=3)  # 18 documents: a run on Ray
    cfg = write_config(tmp_path / "g.yaml", "fit_no_gpu", [big], ray__num_cpus=2,
                       sentences__resources__num_gpus=0.125, **COPIES)
    own, err = _ingest_on_its_own_ray(cfg, cm_home)
    assert own == {"code": 2, "ray_up": False, "left": []}, err[-3000:]
    assert "no node has 1 CPU and 0.125 GPU for one sentences actor" in err
    with psycopg.connect(pg_url) as conn:
        runs = conn.execute("SELECT count(*) FROM corpusmill.runs WHERE collection = 'fit_no_gpu'").fetchone()[0]
    assert runs == 0


@pytest.mark.slow
def test_pools_that_fill_a_small_local_ray_with_nothing_feeding_them_still_run(tmp_path, corpus, cm_home, pg_url):
    """configs/local.yaml on a 2-CPU local Ray: the fused sentence actor and an encoder hold both CPUs, and no
    task runs before them. Ray Data runs such pools; the check must not refuse them."""
    big = big_corpus(corpus, tmp_path / "big", copies=3)  # 18 documents: a run on Ray
    cfg = write_config(tmp_path / "small.yaml", "fit_small", [big], ray__num_cpus=2, **COPIES)
    own, err = _ingest_on_its_own_ray(cfg, cm_home)
    assert own["code"] == 0, err[-3000:]
    assert "cannot run this job's actor pools" not in err
