"""jobs/ray_session.py JobCancel: a Ray Data job stopped from another thread (the fence's driver side,
issue 42 item 4), on the session's Ray head. The end-to-end takeover is in tests/test_ingest.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow

# A job of 400 one-row blocks through an actor that takes 0.2 s a block and marks each it finishes, into a
# sink. SIGINT is ignored: the main thread cannot be interrupted, so only the cancel can stop the job.
_JOB = """
import json, os, signal, sys, threading, time, uuid
import ray, ray.data
from ray.data import Datasink
from jobs.ray_session import CancelledJob, JobCancel

signal.signal(signal.SIGINT, signal.SIG_IGN)
marks = sys.argv[1]
ray.init(address=os.environ["RAY_ADDRESS"], log_to_driver=False)

class Slow:
    def __call__(self, batch):
        time.sleep(0.2)
        open(os.path.join(marks, uuid.uuid4().hex), "w").close()
        return batch

class Sink(Datasink):
    def write(self, blocks, ctx):
        return sum(1 for _ in blocks)

ds = ray.data.range(400, override_num_blocks=400).map_batches(Slow, batch_size=1, concurrency=1)
cancel = JobCancel()
cancel.watch(ds)

def stop():
    while len(os.listdir(marks)) < 3:  # the job is under way
        time.sleep(0.05)
    print("CANCEL " + json.dumps(cancel("another run took the collection")), flush=True)

threading.Thread(target=stop, daemon=True).start()
try:
    ds.write_datasink(Sink())
    cancel.raise_if_cancelled()
    outcome = "finished"
except CancelledJob as exc:
    outcome = str(exc)
time.sleep(1)  # an actor being killed may finish the block it holds
at_return = len(os.listdir(marks))
time.sleep(3)
print("RESULT " + json.dumps({"outcome": outcome, "batches": at_return, "later": len(os.listdir(marks)) - at_return}))
"""


def test_a_cancelled_job_stops_its_actors_and_returns_without_the_main_thread_being_interrupted(tmp_path,
                                                                                                ray_address):
    marks = tmp_path / "marks"
    marks.mkdir()
    env = dict(os.environ, RAY_ADDRESS=ray_address, PYTHONPATH=str(REPO))
    out = subprocess.run([sys.executable, "-c", _JOB, str(marks)], env=env, capture_output=True, text=True,
                         timeout=300, cwd=REPO)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert json.loads(next(x for x in lines if x.startswith("CANCEL ")).removeprefix("CANCEL ")) is True
    result = json.loads(next(x for x in lines if x.startswith("RESULT ")).removeprefix("RESULT "))
    assert result["outcome"] == "another run took the collection"
    assert result["batches"] < 200  # stopped, not run to its end (400)
    assert result["later"] == 0  # its actor is gone: nothing runs after the job returned
