"""Peak RSS of `corpusmill load --from-parquet` and of the QA report, at 1× and N× of one run's Parquet.

    python -m ops.bench.driver_memory RUN_DIR [--copies 1 8]

RUN_DIR is any finished run directory (its `chunks/` parts; an ingest writes one under
CORPUSMILL_HOME/runs). For each multiple N it writes N copies of the parts, each copy's
`source_path` and `chunk_id` made distinct, loads them into a scratch collection of a private
CORPUSMILL_HOME (embedded PostgreSQL, stopped after) and builds the QA report on them, each in its
own process, and prints the peak RSS of each (one wrapper process per measurement). The copies
share their texts, so the database stores them once: this measures the driver's memory, not the
database's work.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ops.bench import common


def copies(src: Path, dst: Path, n: int, distinct_text: bool = False) -> int:
    """`n` copies of `src`'s chunk parts under `dst` (a run directory), each copy's `source_path` and
    `chunk_id` made distinct (with `distinct_text`, its `text_sha256` too, so no copy is stored as
    shared text); returns the embedded (not omitted) rows written."""
    (dst / "chunks").mkdir(parents=True, exist_ok=True)
    if (src / "run.json").exists():
        shutil.copy(src / "run.json", dst / "run.json")
    renamed = ["source_path", "chunk_id"] + (["text_sha256"] if distinct_text else [])
    parts = [pq.read_table(p) for p in sorted((src / "chunks").glob("part-*.parquet"))]
    rows, k = 0, 0
    for c in range(n):
        for t in parts:
            for name in renamed:
                col = t.column(name)
                new = (pc.binary_join_element_wise(pa.scalar(f"copy{c}/"), col, "") if name == "source_path"
                       else pc.binary_join_element_wise(col, pa.scalar(f"-{c}"), ""))
                t = t.set_column(t.schema.get_field_index(name), name, new)
            pq.write_table(t, dst / "chunks" / f"part-{k:05d}.parquet")
            rows += pc.sum(pc.invert(t.column("omitted"))).as_py() or 0
            k += 1
    return rows


# A fresh wrapper per measurement: RUSAGE_CHILDREN's peak is the largest child a process waited for, so
# each measured command must be the wrapper's only child.
_WRAPPER = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL, "
            "stderr=subprocess.DEVNULL); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")


def peak_rss_mib(args: list[str], env: dict) -> int:
    """Run `args` to completion; its peak RSS in MiB."""
    out = subprocess.run([sys.executable, "-c", _WRAPPER, *args], cwd=common.REPO, env=env, check=True,
                         capture_output=True, text=True).stdout
    return round(int(out.split()[-1]) / 1024)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ops.bench.driver_memory", description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--copies", type=int, nargs="+", default=[1, 8])
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="cmmem-"))
    env = dict(os.environ, CORPUSMILL_HOME=str(work / "home"),
               PYTHONPATH=str(common.REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    report = ("import sys; from pathlib import Path; from jobs.tools.report import write_report; "
              "write_report(Path(sys.argv[1]))")
    print("| multiple | parts | load peak RSS (MiB) | report peak RSS (MiB) |\n| --- | --- | --- | --- |")
    try:
        for n in sorted(args.copies):
            run = work / f"x{n}"
            copies(args.run_dir, run, n)
            parts = len(list((run / "chunks").glob("part-*.parquet")))
            load = peak_rss_mib([str(common.BIN / "corpusmill"), "load", "--from-parquet", str(run),
                                 "--collection", f"mem_x{n}"], env)
            rep = peak_rss_mib([sys.executable, "-c", report, str(run)], env)
            print(f"| {n}× | {parts} | {load:,} | {rep:,} |", flush=True)
    finally:
        subprocess.run([str(common.BIN / "corpusmill"), "db", "stop"], env=env, capture_output=True)
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
