"""Per stage: rows/s and seconds for discover, parse, sentences, chunk, embed and load, and how each
grows with corpus size.

    python -m ops.bench.stages        # BENCH_SCALE_BASE=40 BENCH_SCALE_FACTORS=1,4,16

A synthetic corpus of BENCH_SCALE_BASE files spread evenly over the shared corpus, copied 1×, 4× and
16× (copy00/, copy01/, …), goes through `corpusmill ingest` into a fresh collection per size. The
figures are read back from the runs table (`stage_stats.stages`, written by every real run) and
checked against the run's qa/metrics.json. Pipeline stages report summed task seconds of their Ray
operator (stages overlap in time, so these do not add up to the wall time); `wall` is the process.
The driver's peak RSS (its own process's VmHWM, the kernel's high-water mark; the local Ray's processes are not
counted) shows whether the driver grows with the corpus (#19).
"""

from __future__ import annotations

import os
import sys

from ops.bench import common

STAGES = ("discover", "parse", "sentences", "chunk", "embed", "load")


def scale_settings() -> tuple[int, list[int]]:
    base = int(os.environ.get("BENCH_SCALE_BASE") or 40)
    factors = [int(x) for x in (os.environ.get("BENCH_SCALE_FACTORS") or "1,4,16").split(",") if x.strip()]
    return base, factors


def bench() -> dict:
    base, factors = scale_settings()
    sizes = []
    for factor in factors:
        root, files = common.synthetic_corpus(base, factor)
        r = common.ingest(root, f"bench_scale_{factor}x", tag=f"stages-{factor}x")
        recorded = (r["runs_table_stage_stats"] or {}).get("stages")
        sizes.append({"factor": factor, "files": len(files), "wall_s": round(r["wall_s"], 2),
                      "run_seconds": r["metrics"]["stages"].get("seconds_total"), "run_id": r["run_id"],
                      "exit_code": r["rc"], "chunks": r["metrics"]["chunks"]["embedded"],
                      "driver_peak_rss_mib": r["driver_peak_rss_mib"],
                      "stages": recorded or r["metrics"]["stages"].get("stages"),
                      "recorded_in_runs_table": recorded is not None})
    first = sizes[0]
    growth = {}
    for stage in (*STAGES, "wall"):
        def secs(s, stage=stage):
            return s["wall_s"] if stage == "wall" else (s["stages"] or {}).get(stage, {}).get("seconds")
        if secs(first):
            growth[stage] = {f"{s['factor']}x": round(secs(s) / secs(first), 2) if secs(s) is not None else None
                             for s in sizes}
    growth["driver_rss"] = {f"{s['factor']}x": round(s["driver_peak_rss_mib"] / first["driver_peak_rss_mib"], 2)
                            for s in sizes if first["driver_peak_rss_mib"]}
    return {"base_files": base, "factors": factors, "corpus": str(common.corpus_root()), "machine": common.machine(),
            "sizes": sizes, "growth_vs_1x": growth}


def report(r: dict) -> str:
    sizes = r["sizes"]
    headers = ["stage"] + [h for s in sizes for h in (f"{s['factor']}x s", f"{s['factor']}x rows/s")] + \
        [f"growth {s['factor']}x" for s in sizes[1:]]
    rows = []
    fused = [stage for stage in STAGES if any((s["stages"] or {}).get(stage, {}).get("fused") for s in sizes)]
    for stage in STAGES:
        row = [stage + (" *" if stage in fused else "")]
        for s in sizes:
            st = (s["stages"] or {}).get(stage, {})
            row += [st.get("seconds"), st.get("rows_per_second")]
        row += [r["growth_vs_1x"].get(stage, {}).get(f"{s['factor']}x") for s in sizes[1:]]
        rows.append(row)
    wall = ["wall (process)"]
    for s in sizes:
        wall += [s["wall_s"], round(s["files"] / s["wall_s"], 2)]
    wall += [r["growth_vs_1x"].get("wall", {}).get(f"{s['factor']}x") for s in sizes[1:]]
    rows.append(wall)
    rss = ["driver peak RSS (MiB)"]
    for s in sizes:
        rss += [s.get("driver_peak_rss_mib"), None]
    rows.append(rss + [r["growth_vs_1x"].get("driver_rss", {}).get(f"{s['factor']}x") for s in sizes[1:]])
    title = (f"Per stage, synthetic corpus of {r['base_files']} files × " + "/".join(str(f) for f in r["factors"]) +
             " (" + ", ".join(f"{s['files']} files, {s['chunks']} vectors" for s in sizes) + ")")
    note = ("rows: discover" + ("" if "parse" in fused else "/parse") + ("" if "sentences" in fused else "/sentences") +
            " = files, chunk/embed = chunk rows, load = vectors; seconds: summed "
            "task time per stage (they overlap), wall: the whole `corpusmill ingest` process; rows/s in the wall "
            "row = files/s." + ("\n* one fused operator (Ray's, or `ray.fuse_markdown`): its time and output rows "
                                "appear under each stage in it; count it once." if fused else "") +
            "\nrecorded in the runs table: " +
            ", ".join(f"{s['factor']}x {'yes' if s['recorded_in_runs_table'] else 'no'}" for s in sizes))
    return common.table(headers, rows, title) + "\n" + note + "\n"


def main() -> int:
    return common.run_one("stages", bench, report)


if __name__ == "__main__":
    sys.exit(main())
