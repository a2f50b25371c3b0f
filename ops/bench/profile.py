"""Where an ingest spends its time: `corpusmill ingest` under py-spy (driver and every Ray worker).

    python -m ops.bench.profile [N_FILES]      # default 100 files of the corpus

py-spy samples the driver and its child processes (Ray's workers, the stage actors) with idle time
included, then this script sums the samples per process role (driver, parse/sentences/chunk/embed
workers) and lists each role's hottest frames of our code and of the libraries under it. Output:
a table and BENCH_OUT/profile.json (plus the raw py-spy samples in profile.raw.txt).
"""

from __future__ import annotations

import collections
import re
import sys

from ops.bench import common

RATE = 20
# A fused Markdown actor (ray.fuse_markdown) runs all its stages under Chain: its frames name the role.
ROLE_PATTERNS = [("parse+sentences+chunk", r"^Chain\."), ("embed", r"^Embedder\."), ("sentences", r"^SentenceSplitter\."),
                 ("chunk", r"^chunk_documents "), ("parse", r"^parse_documents "), ("driver", r"^cmd_ingest ")]


def aggregate(raw_path, top: int = 8) -> dict:
    """Per process (py-spy's `process PID:"cmd"` first frame), its role from the frames it ran, its busy
    and idle samples, and its hottest frames."""
    procs: dict[str, dict] = collections.defaultdict(lambda: {"samples": 0, "idle": 0, "frames": collections.Counter()})
    for line in open(raw_path, encoding="utf-8", errors="replace"):
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if not count.isdigit():
            continue
        frames = stack.split(";")
        # With --subprocesses each stack starts with the process tree (`process PID:"cmd"` frames, parent
        # first); the last of them is the process the Python frames after it belong to.
        cut = max((i for i, f in enumerate(frames) if f.startswith("process ")), default=-1)
        proc = frames[cut].split(":", 1)[0] if cut >= 0 else "process ?"
        frames = frames[cut + 1:]
        # Ray's helper threads idle and are skipped; threads running our code are not (the embedding
        # actor's encoder workers and concurrent calls are threads).
        if not frames or (frames[0].startswith("Thread._bootstrap") and not any("(jobs/" in f for f in frames)):
            continue
        p = procs[proc]
        n = int(count)
        p["samples"] += n
        leaf = frames[-1]
        if re.search(r"\b(wait|select|poll|epoll_wait|sleep|_wait_for_tstate_lock|get_objects|acquire|recv)\b", leaf):
            p["idle"] += n
        seen = set()
        for f in frames:
            key = re.sub(r":\d+\)$", ")", f)
            if key not in seen:
                seen.add(key)
                p["frames"][key] += n
    out = {}
    for proc, p in procs.items():
        # The role whose code holds the most samples in this process (a worker runs one stage).
        weights = {name: sum(c for f, c in p["frames"].items() if re.search(pat, f)) for name, pat in ROLE_PATTERNS}
        role = max(weights, key=weights.get) if any(weights.values()) else "ray/other"
        hot = [(f, c) for f, c in p["frames"].most_common(60)
               if not f.startswith(("_run_module_as_main", "_run_code", "<module>", "main ("))][:top]
        out[proc] = {"role": role, "seconds": round(p["samples"] / RATE, 1), "idle_seconds": round(p["idle"] / RATE, 1),
                     "hot": [{"frame": f, "seconds": round(c / RATE, 1)} for f, c in hot]}
    return out


def bench(n_files: int = 100) -> dict:
    root, files = common.corpus(n_files, "profile")
    raw = common.out_dir() / "profile.raw.txt"
    # Its own vectors, as common.ingest's runs: the other benchmarks' collections hold the same texts.
    own = common.config_with("profile", {"embedding": {"reuse_other_collections": False}})
    r = common.run([str(common.BIN / "py-spy"), "record", "--subprocesses", "--idle", "--rate", str(RATE),
                    "--format", "raw", "-o", str(raw), "--", str(common.BIN / "corpusmill"), "ingest",
                    "--config", str(own), "--input", str(root), "--collection", "bench_profile"],
                   log=common.out_dir() / "profile.ingest.log", ok=(0, 3))
    procs = aggregate(raw)
    roles: dict[str, dict] = {}
    for p in procs.values():
        role = roles.setdefault(p["role"], {"processes": 0, "seconds": 0.0, "idle_seconds": 0.0, "hot": p["hot"]})
        role["processes"] += 1
        role["seconds"] += p["seconds"]
        role["idle_seconds"] += p["idle_seconds"]
    return {"files": len(files), "wall_s": round(r["wall_s"], 2), "roles": roles, "processes": procs}


def report(r: dict) -> str:
    rows = []
    for role, v in sorted(r["roles"].items(), key=lambda kv: -(kv[1]["seconds"] - kv[1]["idle_seconds"])):
        rows.append([role, v["processes"], round(v["seconds"] - v["idle_seconds"], 1), round(v["idle_seconds"], 1)])
    out = common.table(["process role", "processes", "busy s", "idle s"], rows,
                       f"py-spy over `corpusmill ingest` of {r['files']} files (wall {r['wall_s']} s)")
    for role, v in r["roles"].items():
        if role in ("embed", "driver", "sentences", "chunk"):
            out += f"\n{role}: " + "; ".join(f"{h['frame']} {h['seconds']}s" for h in v["hot"][:6])
    return out + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    with common.session():
        r = bench(int(argv[0]) if argv else 100)
    common.save("profile", r)
    print(report(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
