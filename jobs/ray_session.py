"""The Ray this process runs on: joined (RAY_ADDRESS) or started locally, and stopped in the background
when a job that started it is done. Shared by the jobs that run on Ray (ingest, load, reembed)."""

from __future__ import annotations

import gc
import json
import logging
import os
import threading
import uuid
import warnings
import weakref

import ray
from ray.data import DataContext
from ray.data._internal.execution.execution_callback import ExecutionCallback
from ray.util.annotations import RayDeprecationWarning

from jobs.config import JobConfig
from jobs.errors import ConfigError

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


class _DropMessages(logging.Filter):
    """Drops the records of one logger whose message starts with one of `starts`."""

    def __init__(self, *starts: str):
        super().__init__()
        self.starts = starts

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.starts)


def live_nodes() -> list[dict]:
    """The resources (CPU, GPU, …) of each live node of the Ray this process is on."""
    return [node.get("Resources", {}) for node in ray.nodes() if node.get("Alive")]


def tell_unrunnable(missing: str | None, refuse: bool) -> None:
    """What a job's pools cannot run on (jobs/cluster_fit.py shortfall), told: a ConfigError where `refuse`
    (a local Ray this run started, which cannot grow), else a warning that says what the run waits for (a
    Ray joined may be a cluster an autoscaler grows)."""
    if missing is None:
        return
    if refuse:
        raise ConfigError(f"{missing}. Lower those, or give the local Ray more (ray.num_cpus; GPUs are those "
                          "this machine has)")
    log.warning("%s. The run waits until the cluster has them (an autoscaler adding nodes); if none will come, "
                "stop it (Ctrl-C) and lower those", missing)


def quiet_ray(progress_bars: bool = False) -> None:
    """Silence what Ray prints on every run that is known and says nothing about this run's health. Each
    filter matches one message; anything else Ray says still shows. Idempotent (filters are compared as
    equal, handlers' levels only set)."""
    # Raised by our own map_batches calls (jobs/adapter.py): Ray 2.60 has no named parameters for
    # max_restarts, max_task_retries and max_retries, so they travel in `ray_remote_args`, which keeps
    # working until Ray 2.64 (pyproject.toml pins ray below it).
    warnings.filterwarnings("ignore", message="`ray_remote_args` is deprecated", category=RayDeprecationWarning)
    # A small run has fewer blocks than writers or actors: Ray notes that some of them idle, which is true
    # and costs nothing (a writer holds no CPU, jobs/store/datasink.py).
    warnings.filterwarnings("ignore", message="The m[a-z]+ number of concurrent (tasks|actors) for .* but the "
                            "operator only received", category=UserWarning)
    # Token authentication is on, the safe default for a Ray this process starts or joins. The warning
    # that it is *off* stays.
    _add_filter("ray._private.authentication.authentication_token_setup",
                _DropMessages("Token authentication is enabled"))
    # Ray Data's bars are off because corpusmill draws its own progress line (ray.progress_bars).
    _add_filter("ray.data._internal.progress", _DropMessages("Progress bars disabled"))
    if not progress_bars and logging.getLogger().getEffectiveLevel() > logging.DEBUG:
        # Ray Data's execution log (the plan, start and end, the sink's byte count, its progress off a
        # terminal) stays in the session's ray-data.log; -v shows it here too. Its warnings still show.
        for handler in logging.getLogger("ray.data").handlers:
            if not isinstance(handler, logging.FileHandler) and type(handler).__name__ != "SessionFileHandler":
                handler.setLevel(logging.WARNING)


def _add_filter(logger: str, flt: _DropMessages) -> None:
    target = logging.getLogger(logger)
    if not any(isinstance(f, _DropMessages) and f.starts == flt.starts for f in target.filters):
        target.addFilter(flt)


def init_ray(cfg: JobConfig) -> bool:
    """Start a local Ray (or join RAY_ADDRESS) unless this process has one already. True when this call
    started a Ray of the process's own: the run then stops it itself (stop_ray_in_background). A `ray
    start` cluster running on this machine is joined only through RAY_ADDRESS: without it Ray would
    find that cluster and refuse the num_cpus it is given."""
    if ray.is_initialized():
        return False
    quiet_ray(cfg.ray.progress_bars)
    # The driver's "ray" logger at INFO only says that Ray started or was joined; -v keeps it.
    level = logging.INFO if logging.getLogger().getEffectiveLevel() <= logging.DEBUG else logging.WARNING
    address = os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address, include_dashboard=False, log_to_driver=True, runtime_env=driver_runtime_env(),
                 logging_level=level)
    else:
        # A local Ray's workers inherit this process's environment. Setting the variables here rather
        # than in a runtime_env spares every worker Ray's runtime_env start-up (setup_worker.py, which
        # imports Ray and then execs the real worker, which imports it again).
        os.environ.update(WORKER_ENV)
        ray.init(address="local", num_cpus=cfg.ray.num_cpus or max(os.cpu_count() or 1, 4),
                 include_dashboard=False, log_to_driver=True, logging_level=level)
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


class JobCancel:
    """Stops a Ray Data job from another thread: the driver's side of the fence (jobs/store/locks.py
    LeaseWatch calls it once another run owns the collection). Interrupting the main thread is not
    enough: a process started with SIGINT ignored (`corpusmill ingest … &` in a script, nohup) gets no
    interrupt from `_thread.interrupt_main`, one that lands in a finalizer is dropped, and the job then
    ran to its end on writers that could no longer commit (minutes). So the executors of the datasets
    `watch`ed here are
    shut down with force from the calling thread: their actors are killed and their running tasks
    cancelled (a task's worker process is ended), on a local Ray and on a cluster alike, and the
    consuming thread's iterator ends; the caller then raises (`raise_if_cancelled`). Ray Data offers
    no public handle on a running execution: its execution callbacks (a DeveloperAPI field of the
    dataset's context; the class from ray.data._internal, Ray pinned below 2.64 in pyproject.toml)
    hand over each executor as it starts."""

    def __init__(self) -> None:
        self.reason: str | None = None
        self._running: list = []
        self._lock = threading.Lock()
        self.key = uuid.uuid4().hex
        _CANCELS[self.key] = self

    def watch(self, ds) -> None:
        """Cancel `ds`'s executions (on the dataset's own context, which its write runs under). The context
        travels to the workers: the callback class carries only this object's key."""
        callback = type("StopWhenCancelled", (_StopWhenCancelled,), {"key": self.key})
        ds.context.custom_execution_callback_classes = [*ds.context.custom_execution_callback_classes, callback]

    def _started(self, executor) -> None:
        with self._lock:
            if self.reason is None:
                self._running.append(executor)
                return
        raise CancelledJob(self.reason)

    def _done(self, executor) -> None:
        with self._lock:
            if executor in self._running:
                self._running.remove(executor)

    def __call__(self, reason: str) -> bool:
        """Stop what runs, for `reason`; True when an execution was running (then its consumer returns or
        raises within seconds and need not be interrupted)."""
        with self._lock:
            self.reason = self.reason or reason
            running, self._running = self._running, []
        for executor in running:
            try:
                executor.shutdown(force=True, exception=CancelledJob(reason))
            except Exception:  # already shutting down, or Ray going away: the consumer raises either way
                log.debug("could not shut down a Ray Data execution", exc_info=True)
        return bool(running)

    def raise_if_cancelled(self) -> None:
        if self.reason is not None:
            raise CancelledJob(self.reason)


_CANCELS: weakref.WeakValueDictionary[str, JobCancel] = weakref.WeakValueDictionary()


class _StopWhenCancelled(ExecutionCallback):
    """Hands each execution of a watched dataset to its JobCancel (`key`), on the driver."""

    key = ""

    def before_execution_starts(self, executor) -> None:
        cancel = _CANCELS.get(self.key)
        if cancel is not None:
            cancel._started(executor)

    def after_execution_succeeds(self, executor) -> None:
        self._done(executor)

    def after_execution_fails(self, executor, error) -> None:
        self._done(executor)

    def _done(self, executor) -> None:
        cancel = _CANCELS.get(self.key)
        if cancel is not None:
            cancel._done(executor)


class CancelledJob(RuntimeError):
    """The job was stopped from outside (JobCancel): its caller knows why."""
