"""A fenced run stops: the seconds from a second run's start to the first run's exit (#42.4).

    python -m ops.bench.fence     # BENCH_FILES (default 300) pages; BENCH_FENCE_AFTER=10; BENCH_FENCE_FINISH=1

In one private session (each `corpusmill ingest` starts its own local Ray, as a user's does): run A ingests
the first BENCH_FILES pages of the corpus with configs/local.yaml (its own vectors). Once A has committed
BENCH_FENCE_AFTER (10) documents, its lock-holding session (`corpusmill ingest <run_id>` in
pg_stat_activity) is terminated and run B of the same collection starts at once; B takes the collection.
Measured from outside: B's start to A's exit (A must exit 2, naming B), and the documents A committed after
B's start (the fence: 0). B is then interrupted (SIGTERM) unless BENCH_FENCE_FINISH=1 lets it finish, which
also times B. A's Ray job going on after the takeover shows as the gap, and as CPU B does not get. Both runs
start with SIGINT ignored, as a shell script's background job (`corpusmill ingest … &`) or nohup starts them
(BENCH_FENCE_SIGINT=default keeps Python's handler).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psycopg

from ops.bench import common

COLLECTION = "bench_fence"


def _count_done(conn, run_id: str | None = None) -> int:
    query = "SELECT count(*) FROM corpusmill.documents WHERE collection = %s AND status = 'done'"
    args: tuple = (COLLECTION,)
    if run_id:
        query, args = query + " AND run_id = %s", (COLLECTION, run_id)
    try:
        return conn.execute(query, args).fetchone()[0]
    except psycopg.errors.UndefinedTable:
        return 0


def _running(conn) -> str | None:
    try:
        row = conn.execute("SELECT run_id FROM corpusmill.runs WHERE collection = %s AND status = 'running'",
                           (COLLECTION,)).fetchone()
    except psycopg.errors.UndefinedTable:
        return None
    return row[0] if row else None


def bench() -> dict:
    n = common.bench_files() or 300
    after = int(os.environ.get("BENCH_FENCE_AFTER") or 10)
    finish = os.environ.get("BENCH_FENCE_FINISH") == "1"
    root, files = common.corpus(n, name="fence")
    config = common.config_with("fence", {"embedding": {"reuse_other_collections": False}})
    url = common.database_url()
    env = dict(os.environ, PYTHONPATH=str(common.REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    ignore = os.environ.get("BENCH_FENCE_SIGINT", "ignore") == "ignore"

    def as_background_job() -> None:
        if ignore:
            signal.signal(signal.SIGINT, signal.SIG_IGN)

    args = [str(common.BIN / "corpusmill"), "ingest", "--config", str(config), "--input", str(root),
            "--collection", COLLECTION]
    log_a, log_b = common.out_dir() / "fence-a.log", common.out_dir() / "fence-b.log"
    t_a = time.monotonic()
    b = None
    with open(log_a, "w") as err_a, open(log_b, "w") as err_b, psycopg.connect(url, autocommit=True) as conn:
        a = subprocess.Popen(args, cwd=common.REPO, env=env, stdout=subprocess.DEVNULL, stderr=err_a,
                             preexec_fn=as_background_job)
        try:
            run_a = None
            while a.poll() is None and (run_a is None or _count_done(conn, run_a) < after):
                run_a = run_a or _running(conn)
                time.sleep(0.2)
            if a.poll() is not None:
                raise RuntimeError(f"run A ended (exit {a.returncode}) before the takeover; see {log_a}")
            done_a = _count_done(conn, run_a)
            cut = conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
                               (f"corpusmill ingest {run_a}",)).fetchall()
            t_b = time.monotonic()
            b = subprocess.Popen(args, cwd=common.REPO, env=env, stdout=subprocess.DEVNULL, stderr=err_b,
                                 preexec_fn=as_background_job)
            a.wait(timeout=1800)
            t_exit = time.monotonic()
            b_running = b.poll() is None
            # B's takeover as the database saw it (its owner token written) to A's exit, on the server's clock.
            taken = conn.execute("SELECT extract(epoch FROM now() - taken_at) FROM corpusmill.collection_owners "
                                 "WHERE collection = %s", (COLLECTION,)).fetchone()[0]
            takeover_to_exit = float(taken) - (time.monotonic() - t_exit)
            started_b = conn.execute("SELECT min(started_at) FROM corpusmill.runs WHERE collection = %s "
                                     "AND run_id <> %s", (COLLECTION, run_a)).fetchone()[0]
            late = conn.execute("SELECT count(*) FROM corpusmill.documents WHERE collection = %s AND run_id = %s "
                                "AND updated_at > %s", (COLLECTION, run_a, started_b)).fetchone()[0] if started_b else 0
            if finish:
                b.wait(timeout=3600)
            else:
                b.terminate()
                b.wait(timeout=600)
            t_end = time.monotonic()
        finally:
            for proc in (a, b):
                if proc is not None and proc.poll() is None:
                    proc.kill()
                    proc.wait()
    last_a = (log_a.read_text(encoding="utf-8", errors="replace").strip().splitlines() or [""])[-1]
    return {"files": len(files), "sigint_ignored": ignore, "takeover_after_documents": done_a, "sessions_cut": len(cut),
            "a_exit": a.returncode, "a_last_line": last_a[-300:],
            "seconds_a_before_takeover": round(t_b - t_a, 1),
            "seconds_b_start_to_a_exit": round(t_exit - t_b, 1),
            "seconds_takeover_to_a_exit": round(takeover_to_exit, 1),
            "b_running_when_a_exited": b_running,
            "a_documents_committed_after_b_started": late,
            "b_exit": b.returncode, "b_finished": finish, "seconds_b": round(t_end - t_b, 1),
            "machine": common.machine()}


def report(r: dict) -> str:
    rows = [[r["files"], r["takeover_after_documents"], r["seconds_b_start_to_a_exit"], r["seconds_takeover_to_a_exit"],
             r["a_exit"], r["b_running_when_a_exited"], r["a_documents_committed_after_b_started"],
             r["seconds_b"] if r["b_finished"] else "-"]]
    title = "A fenced run stops"
    return common.table(["pages", "A done at takeover", "B start → A exit s", "B takeover → A exit s", "A exit",
                         "B still running", "A commits after B", "B wall s"], rows, title) + (
        f"\nA's last line: {r['a_last_line']}\n")


if __name__ == "__main__":
    sys.exit(common.standalone("fence", bench, report))
