"""A one-page edit into a large collection against the same edit into an empty one (issue 41, item 6).

    python -m ops.bench.edit_cost        # BENCH_EDIT_ROWS=100000 (the large collection's chunks)
    BENCH_HOME=DIR BENCH_EDIT_LARGE=scale_1000000 python -m ops.bench.edit_cost   # a collection DIR holds

The large collection is built cheaply: a small seed ingest (BENCH_EDIT_SEED_FILES Hugo pages, embedded
once), copied and perturbed as ops/bench/scale.py does up to BENCH_EDIT_ROWS chunks, and loaded by
`corpusmill load --from-parquet` (its index builds included). Then one new page at a time, each
`corpusmill ingest --keep-removed` of a folder holding only that page, as a user adds a page:
into the large collection, and into a fresh empty collection of the same database. Each edit is timed
from outside (the process's wall time) and by the run itself (the seconds its summary prints, and its
stages from the runs table, `upkeep` among them). BENCH_EDIT_PAGES (2) pages, alternating the two
sides so that the machine's load falls on both; the ratio is of the medians of the outside times.
BENCH_EDIT_LARGE names a collection the kept BENCH_HOME already holds (`make bench-scale` leaves
`scale_<size>` there) to edit instead of building one: a 1M-chunk collection costs a quarter of an hour
to load on two cores, and the scale benchmark has just loaded one.
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import sys
import time
from pathlib import Path

from ops.bench import common, scale

ROWS = int(os.environ.get("BENCH_EDIT_ROWS", "100000"))
LARGE = os.environ.get("BENCH_EDIT_LARGE", "").strip()
SEED_FILES = int(os.environ.get("BENCH_EDIT_SEED_FILES", "40"))
PAGES = int(os.environ.get("BENCH_EDIT_PAGES", "2"))
_SECONDS = re.compile(r"· ([0-9.]+) s")


def _page_dir(page: Path, k: int, stamp: str) -> Path:
    """A folder with only `page` in it, at a path no document of either collection has (`stamp`: this
    benchmark run's, so that a kept home's large collection gets a new page again)."""
    dest = common.work_dir() / f"edit-page-{k}"
    shutil.rmtree(dest, ignore_errors=True)
    target = dest / f"added-{stamp}" / f"page-{k}{page.suffix}"
    target.parent.mkdir(parents=True)
    shutil.copyfile(page, target)
    return dest


def edit(page_dir: Path, collection: str, config: Path, tag: str) -> dict:
    """`ingest --keep-removed` of one page: outside wall time, the run's own seconds and its stages."""
    r = common.run([str(common.BIN / "corpusmill"), "ingest", "--config", str(config), "--input", str(page_dir),
                    "--collection", collection, "--keep-removed"], log=common.out_dir() / f"edit-{tag}.log", ok=(0, 3))
    said = next((float(m.group(1)) for line in r["stdout"].splitlines() if line.startswith("this run:")
                 for m in [_SECONDS.search(line)] if m), None)
    run_id = next((line.split()[1] for line in r["stdout"].splitlines() if line.startswith("run ")), None)
    stages = (common.runs_table_stats(run_id) or {}) if run_id else {}
    return {"wall_s": round(r["wall_s"], 2), "reported_s": said, "rc": r["rc"], "run_id": run_id,
            "upkeep_s": (stages.get("upkeep") or {}).get("seconds"), "load_avg_1m": r["load_avg_1m"],
            "stages": {k: v.get("seconds") for k, v in (stages.get("stages") or {}).items() if isinstance(v, dict)}}


def bench() -> dict:
    import psycopg

    url = common.database_url()
    files = common.markdown_files(common.corpus_root())
    config = common.config_with("edit-cost", {"embedding": {"reuse_other_collections": False}})
    run = common.work_dir() / f"edit-{ROWS}"
    with psycopg.connect(url) as conn:  # a kept BENCH_HOME holds the large collection of an earlier run
        exists = (conn.execute("SELECT to_regclass('corpusmill.collections')").fetchone()[0] is not None
                  and conn.execute("SELECT 1 FROM corpusmill.collections WHERE name = 'edit_large'").fetchone())
    load_s, large_name = None, LARGE or "edit_large"
    if LARGE:
        with psycopg.connect(url) as conn:
            table = conn.execute("SELECT chunk_table FROM corpusmill.collections WHERE name = %s", (LARGE,)).fetchone()
            if table is None:
                raise SystemExit(f"BENCH_EDIT_LARGE={LARGE}: no such collection in {common.database_url()}")
            rows = conn.execute(f"SELECT count(*) FROM corpusmill.{table[0]}").fetchone()[0]
    elif not exists or not (run / "rows").exists():
        seed_input, _ = common.corpus(SEED_FILES, name="edit-seed")
        seed_dir = Path(common.ingest(seed_input, "edit_seed", config=config, tag="edit-seed")["run_dir"])
        scale.make_run(seed_dir, scale.seed_rows(seed_dir), ROWS, run)
        load_s = round(common.run([str(common.BIN / "corpusmill"), "load", "--from-parquet", str(run), "--collection",
                                   "edit_large", "--config", str(config)],
                                  log=common.out_dir() / "edit-load.log")["wall_s"], 1)
    if not LARGE:
        rows = int((run / "rows").read_text())
    pages = files[len(files) // 2:][:PAGES]  # pages the seed (the corpus' first files) does not hold
    stamp = time.strftime("%Y%m%d%H%M%S")
    large, empty = [], []
    for k, page in enumerate(pages):
        page_dir = _page_dir(page, k, stamp)
        large.append(edit(page_dir, large_name, config, f"large-{k}"))
        empty.append(edit(page_dir, f"edit_empty_{stamp}_{k}", config, f"empty-{k}"))
    median = {side: statistics.median(e["wall_s"] for e in runs) for side, runs in (("large", large), ("empty", empty))}
    return {"machine": common.machine(), "rows": rows, "load_wall_s": load_s,
            "pages": [str(p.relative_to(common.corpus_root())) for p in pages], "large": large, "empty": empty,
            "median_wall_s": median, "ratio": round(median["large"] / median["empty"], 2)}


def report(r: dict) -> str:
    rows = []
    for side in ("large", "empty"):
        for k, e in enumerate(r[side]):
            rows.append([f"{side} #{k + 1}", e["wall_s"], e["reported_s"], e.get("upkeep_s"), e["stages"].get("load"),
                         e["stages"].get("index")])
    out = common.table(["edit into", "wall s", "reported s", "upkeep s", "load s", "index s"], rows,
                       f"One-page `ingest --keep-removed` into {r['rows']:,} chunks vs an empty collection")
    return out + (f"\n\nmedian wall: {r['median_wall_s']['large']:.1f} s vs {r['median_wall_s']['empty']:.1f} s; "
                  f"ratio {r['ratio']} (target ≤ 2)")


def main(argv: list[str] | None = None) -> int:
    return common.standalone("edit_cost", bench, report)


if __name__ == "__main__":
    sys.exit(main())
