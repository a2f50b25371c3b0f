"""What a run prints: progress that moves while it writes, and none of Ray's known, harmless noise; and a
run that starts its own Ray stops it before it returns."""

import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import warnings

import pytest

from tests.conftest import COPIES, big_corpus, write_config
from tests.test_ingest import pace_collection, status, unpace_inserts

# Lines Ray prints on every run, each silenced by jobs.ray_session.quiet_ray (or by the bars being off).
NOISE = ("RayDeprecationWarning", "ray_remote_args", "only received", "Progress bars disabled",
         "Token authentication is enabled", "Started a local Ray instance", "Execution plan of Dataset",
         "logging_progress", "Data sink CorpusmillWrite finished")


def test_a_small_run_is_split_into_blocks_that_reach_the_writers_in_steps():
    from jobs.on_ray import SMALL_RUN_DOCUMENTS, embed_batch_rows, first_block_documents

    assert first_block_documents(40, 40, 8) == 5  # 8 blocks of 5 documents rather than 5 of 8
    assert first_block_documents(40, 3, 8) == 1  # a type with few documents: one a block
    assert first_block_documents(SMALL_RUN_DOCUMENTS + 1, 200, 8) == 8  # a larger run keeps its configured blocks
    assert embed_batch_rows(40, 512) == 32 and embed_batch_rows(40, 16) == 16
    assert embed_batch_rows(SMALL_RUN_DOCUMENTS + 1, 512) == 512


def test_quiet_ray_drops_the_known_messages_and_nothing_else(caplog):
    from ray.util.annotations import RayDeprecationWarning

    from jobs.ray_session import quiet_ray

    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        quiet_ray()
        warnings.warn("`ray_remote_args` is deprecated and will be removed in Ray 2.64.", RayDeprecationWarning, stacklevel=1)
        warnings.warn("The maximum number of concurrent tasks for 'Write' is set to 2, but the operator only "
                      "received 1 input(s).", UserWarning, stacklevel=1)
        warnings.warn("The minimum number of concurrent actors for 'embed' is set to 2, but the operator only "
                      "received 1 input(s).", UserWarning, stacklevel=1)
        warnings.warn("`something_else` is deprecated", RayDeprecationWarning, stacklevel=1)
    assert [str(w.message) for w in shown] == ["`something_else` is deprecated"]
    caplog.set_level(logging.INFO)
    auth = logging.getLogger("ray._private.authentication.authentication_token_setup")
    auth.warning("Token authentication is enabled for this Ray cluster. Set RAY_AUTH_MODE=disabled to opt out.")
    auth.warning("Token authentication is disabled for this Ray cluster. Anyone with network access ...")
    logging.getLogger("ray.data._internal.progress").warning("Progress bars disabled. To enable, set …")
    assert [r.getMessage().split(".")[0] for r in caplog.records] == [
        "Token authentication is disabled for this Ray cluster"]


# `corpusmill ingest` through the CLI's main, then, before the process ends: is Ray still initialised in it,
# and is any process left that names the run's Ray temp dir (stopped, not waited for: they may take a moment).
OWN_RAY = (
    "import json, os, subprocess, sys, time\n"
    "from jobs.cli import main\n"
    "code = main(['ingest', '--config', sys.argv[1]])\n"
    "import ray\n"
    "ray_up = ray.is_initialized()\n"
    "for _ in range(50):\n"
    "    found = subprocess.run(['pgrep', '-f', sys.argv[2]], capture_output=True, text=True).stdout.split()\n"
    "    left = [pid for pid in found if int(pid) != os.getpid()]  # this script names the directory too\n"
    "    if not left:\n"
    "        break\n"
    "    time.sleep(0.2)\n"
    "print(json.dumps({'code': code, 'ray_up': ray_up, 'left': left}))\n"
)


@pytest.mark.slow
def test_an_ingest_on_its_own_ray_shows_progress_that_moves_no_ray_noise_and_stops_its_ray(tmp_path, corpus, cm_home,
                                                                                           pg_url):
    """Without RAY_ADDRESS a run of more documents than ray.in_process_max_documents starts a private local
    Ray, and stops it during its last steps rather than leaving it to the exit hook: it is down when the
    command returns, processes and all (an API caller's process goes on)."""
    big = big_corpus(corpus, tmp_path / "big", copies=3)  # 18 documents, a run on Ray (more than 16)
    n_docs = len(list(big.rglob("*.md")))
    cfg = write_config(tmp_path / "p.yaml", "out_progress", [big], sink__progress_seconds=0.2, **COPIES)
    ray_tmp = tempfile.mkdtemp(prefix="cmout-", dir="/tmp")  # Unix socket paths must stay short
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_MODE")}
    env.update(CORPUSMILL_HOME=str(cm_home), RAY_TMPDIR=ray_tmp, TOKENIZERS_PARALLELISM="false")
    proc = subprocess.Popen([sys.executable, "-c", OWN_RAY, str(cfg), ray_tmp], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    paced = None
    try:
        # Each commit held 0.5 s by the database: the writes span several progress samples on any machine.
        paced = pace_collection(pg_url, "out_progress", proc, seconds=0.5)
        out, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        if paced:
            unpace_inserts(pg_url, paced)
        subprocess.run(["pkill", "-f", ray_tmp], capture_output=True)
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert proc.returncode == 0, err[-3000:]
    own = json.loads(out.strip().splitlines()[-1])
    assert own == {"code": 0, "ray_up": False, "left": []}, err[-3000:]
    assert "did not stop cleanly" not in err
    assert status("out_progress")["documents"] == {"done": n_docs, "failed": 0, "pending": 0}
    committed = [int(m) for m in re.findall(rf"committed (\d+)/{n_docs} documents", err)]
    assert committed == sorted(committed) and committed[-1] == n_docs
    assert [n for n in committed if 0 < n < n_docs], err  # seen part way, not only at 0 and at the end
    assert [line for line in err.splitlines() if any(noise in line for noise in NOISE)] == []
    assert "\r" not in err  # off a terminal: log lines, no redrawn line
