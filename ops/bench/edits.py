"""Edit to searchable: a full ingest, then a few pages edited and ingested again: in process and on Ray, with
vector reuse on and off (#20).

    python -m ops.bench.edits          # BENCH_FILES=200 for a quick check; BENCH_EDITS=10; BENCH_ROUNDS=3

In one private session: a default ingest (configs/local.yaml) of a copy of the corpus into a fresh
collection; then BENCH_EDITS pages spread evenly over it each get a new paragraph, and `corpusmill
ingest` runs again (the default: at most `ray.in_process_max_documents` documents run in the driver
process, with `embedding.reuse: true`); then the same pages get another paragraph for a run on Ray
(`in_process_max_documents: 0`), and another for a run with `embedding.reuse: false` (copies of the
config; neither key is part of the fingerprint, so every edit run plans the same updates). The three
edit runs alternate over BENCH_ROUNDS rounds (default 3), each round editing the pages again: an edit
run's wall moves by ±2 s with what the database and the machine do after the full run (a checkpoint,
autovacuum), so each is reported as the median of its rounds (the run of the median is the one
shown). For each run: wall time (the process, timed from outside), its ratio to the full run, files
updated, and the vectors computed and reused (from the run's metrics.json). An edited page's
unchanged chunks are what reuse saves; the fixed cost of a run (Ray, the models) is what it cannot,
and what the in-process path saves. Last, the edited corpus is ingested whole under a new collection
name twice: with vectors taken from the first collection (`embedding.reuse_other_collections`, the
default) and with its own (the setting off, as every other benchmark run has it).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from ops.bench import common


def edit(files: list[Path], round_: int) -> None:
    for f in files:
        with f.open("a", encoding="utf-8") as out:
            out.write(f"\n\nA paragraph the edit benchmark added in round {round_}, about nothing else.\n")


def _entry(name: str, r: dict, full_wall: float | None, walls: list[float] | None = None) -> dict:
    c, f = r["metrics"]["chunks"], r["metrics"]["files"]
    return {"run": name, "wall_s": round(r["wall_s"], 2), "rounds_wall_s": [round(w, 2) for w in walls or [r["wall_s"]]],
            "ratio_to_full": round(r["wall_s"] / full_wall, 3) if full_wall else 1.0,
            "updated": f.get("update", 0), "added": f.get("add", 0),
            "vectors_computed": c.get("vectors_computed"), "vectors_reused": c.get("vectors_reused"),
            "driver_peak_rss_mib": r.get("driver_peak_rss_mib")}


def bench() -> dict:
    n_edits = int(os.environ.get("BENCH_EDITS") or 10)
    source, _ = common.corpus(common.bench_files(), name="edits-source")
    root = common.work_dir() / "edits-corpus"
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(source, root)
    files = common.markdown_files(root)
    step = max(1, len(files) // n_edits)
    edited = files[::step][:n_edits]
    rounds = max(1, int(os.environ.get("BENCH_ROUNDS") or 3))
    full = common.ingest(root, "bench_edits", tag="edits-full")
    on_ray = common.config_with("on-ray", {"ray": {"in_process_max_documents": 0}})
    no_reuse = common.config_with("no-reuse", {"embedding": {"reuse": False}})
    variants = [("edit, in process", common.CONFIG, "edits-reuse"), ("edit, on Ray", on_ray, "edits-ray"),
                ("edit, in process, reuse off", no_reuse, "edits-no-reuse")]
    seen: dict[str, list[dict]] = {name: [] for name, _, _ in variants}
    n = 0
    for _ in range(rounds):
        for name, config, tag in variants:
            n += 1
            edit(edited, n)
            seen[name].append(common.ingest(root, "bench_edits", config=config, tag=f"{tag}-{len(seen[name]) + 1}"))
    runs = [_entry("full", full, None)]
    for name, results in seen.items():
        ordered = sorted(results, key=lambda r: r["wall_s"])
        runs.append(_entry(name, ordered[len(ordered) // 2], full["wall_s"], [r["wall_s"] for r in results]))
    # The whole corpus again under new collection names: vectors from the first collection, then its own.
    runs.append(_entry("another collection, reusing", common.ingest(
        root, "bench_edits_copy", tag="edits-copy-reusing", own_vectors=False), full["wall_s"]))
    runs.append(_entry("another collection, own vectors", common.ingest(
        root, "bench_edits_own", tag="edits-copy-own"), full["wall_s"]))
    return {"files": len(files), "edited": len(edited), "rounds": rounds, "corpus": str(common.corpus_root()),
            "machine": common.machine(), "runs": runs}


def report(r: dict) -> str:
    rows = [[x["run"], x["wall_s"], " / ".join(f"{w:g}" for w in x.get("rounds_wall_s", [x["wall_s"]])),
             x["ratio_to_full"], x["updated"], x["vectors_computed"], x["vectors_reused"], x["driver_peak_rss_mib"]]
            for x in r["runs"]]
    return common.table(["run", "wall s (median)", "each round", "of full", "updated", "vectors computed",
                         "vectors reused", "driver RSS MiB"], rows,
                        f"Edit to searchable: {r['edited']} of {r['files']} pages edited, ingested again "
                        f"({r.get('rounds', 1)} alternating rounds)") + "\n"


if __name__ == "__main__":
    sys.exit(common.standalone("edits", bench, report))
