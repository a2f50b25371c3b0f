"""The Ray this process runs on: joined (RAY_ADDRESS) or started locally, and stopped in the background
when a job that started it is done. Shared by the jobs that run on Ray (ingest, load, reembed)."""

from __future__ import annotations

import gc
import json
import logging
import os
import threading

import ray
from ray.data import DataContext

from jobs.config import JobConfig

log = logging.getLogger(__name__)


# Workers load models from package paths; tokenizers' own threads would fight Ray's workers.
WORKER_ENV = {"TOKENIZERS_PARALLELISM": "false", "HF_HUB_DISABLE_TELEMETRY": "1"}


def driver_runtime_env() -> dict:
    """The runtime_env this driver adds to its workers'. Inside a submitted Ray job, ray.init refuses
    to merge a runtime_env that sets a variable the job's own runtime_env sets too, so the job's
    values stand and only the missing ones are added."""
    job = json.loads(os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR") or "{}")
    job_vars = ((job.get("runtime_env") or {}).get("env_vars") or {})
    extra = {k: v for k, v in WORKER_ENV.items() if k not in job_vars}
    return {"env_vars": extra} if extra else {}


def cores_of(cluster: dict) -> int:
    """The cores the stages and writers share. A local Ray counts more logical CPUs than the machine has
    cores (see init_ray): this machine's; a cluster joined (RAY_ADDRESS) advertises its nodes' cores."""
    return (os.cpu_count() or 1) if not os.environ.get("RAY_ADDRESS") else int(cluster.get("CPU", 1))


def init_ray(cfg: JobConfig) -> bool:
    """Start a local Ray (or join RAY_ADDRESS) unless this process has one already. True when this call
    ran `ray.init` without an address, which starts a Ray of the process's own (or, should a `ray
    start` cluster be running on this machine, joins it): the run then stops it itself
    (stop_ray_in_background), and stopping a Ray it only joined just disconnects."""
    if ray.is_initialized():
        return False
    address = os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address, include_dashboard=False, log_to_driver=True, runtime_env=driver_runtime_env())
    else:
        # A local Ray's workers inherit this process's environment. Setting the variables here rather
        # than in a runtime_env spares every worker Ray's runtime_env start-up (setup_worker.py, which
        # imports Ray and then execs the real worker, which imports it again).
        os.environ.update(WORKER_ENV)
        ray.init(num_cpus=cfg.ray.num_cpus or max(os.cpu_count() or 1, 4), include_dashboard=False,
                 log_to_driver=True)
    ctx = DataContext.get_current()
    ctx.enable_progress_bars = cfg.ray.progress_bars
    ctx.enable_operator_progress_bars = cfg.ray.progress_bars
    return not address


def stop_ray_in_background() -> threading.Thread:
    """Stop the local Ray this run started while the driver builds the index and writes the report.
    Its processes take a second or two to exit, and left to Ray's exit hook, which also sleeps half
    a second first, the job would wait through both after its last step. The caller drops its Ray
    objects first: those caught in reference cycles are collected here, while Ray is up, since one
    finalized after the shutdown reaches a core worker that is gone and Ray exits the process (1)."""
    gc.collect()

    def stop() -> None:
        try:
            ray.shutdown()
        except Exception:  # the run is done; a Ray that does not stop cleanly must not fail it
            log.warning("the local Ray did not stop cleanly", exc_info=True)

    thread = threading.Thread(target=stop, name="ray-shutdown", daemon=True)
    thread.start()
    return thread
