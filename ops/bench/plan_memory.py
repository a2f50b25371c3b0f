"""Peak RSS of `corpusmill plan` at 1×, 4× and 16× of a corpus: a first plan (nothing stored, every file
to add) and a rerun's (every file stored and unchanged by its listing), and the same by an older
commit from its own worktree when `--rev` names one.

    python -m ops.bench.plan_memory [--files 2000] [--multiples 1 4 16] [--rev REV]

The corpus is small synthetic Markdown notes (a heading and a paragraph each) in directories of 100.
The rerun's checkpoint rows are written through the store's own commit path (documents done, with
their sha256 and listing, no chunks), as an ingest leaves them, so no model runs: this measures the
plan, not the pipeline. Each command runs in a fresh wrapper process whose only child it is, in a
private CORPUSMILL_HOME (embedded PostgreSQL, stopped after).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from ops.bench import common
from ops.bench.driver_memory import _WRAPPER


def write_corpus(root: Path, n: int) -> None:
    for i in range(n):
        d = root / f"d{i // 100:05d}"
        if i % 100 == 0:
            d.mkdir(parents=True, exist_ok=True)
        (d / f"note-{i:07d}.md").write_text(f"# Note {i}\n\nThe text of note {i}, a paragraph of its own.\n")


def seed(config: Path, env: dict) -> None:
    """Every planned file stored `done` under its sha256 and listing, through PgStore's commit path."""
    code = f"""
import os
from jobs.config import load_config, apply_overrides
from jobs.plan import make_plan_for
from jobs.store.arrow_copy import rows_table
from jobs.store.pgvector import PgStore
from jobs.store.url import database_url
cfg = apply_overrides(load_config({str(config)!r}))
with PgStore(database_url(cfg)) as store:
    store.migrate()
    coll = store.ensure_collection(cfg.collection, cfg.embedding.reference, 384)
    files = make_plan_for(cfg, store).add
    docs = [{{"doc_id": f"d{{i}}", "source_path": f.source_path, "source_type": f.source_type,
             "content_sha256": f.content_sha256, "pipeline_fingerprint": cfg.fingerprint(),
             "source_size": f.size_bytes, "source_etag": f.listing_tag}} for i, f in enumerate(files)]
    for i in range(0, len(docs), 2000):
        store.commit_documents(coll, docs[i:i + 2000], rows_table([]), "seed")
"""
    subprocess.run([sys.executable, "-c", code], cwd=common.REPO, env=env, check=True)


def peak(args: list[str], env: dict, cwd: Path) -> int:
    out = subprocess.run([sys.executable, "-c", _WRAPPER, *args], cwd=cwd, env=env, check=True,
                         capture_output=True, text=True).stdout
    return round(int(out.split()[-1]) / 1024)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ops.bench.plan_memory", description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--multiples", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--rev", help="an older commit to measure beside this checkout (from its own worktree)")
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="cmplan-"))
    env = dict(os.environ, CORPUSMILL_HOME=str(work / "home"), PYTHONPATH=str(common.REPO))
    env.pop("RAY_ADDRESS", None)
    sides = [("this checkout", common.REPO)]
    if args.rev:
        old = work / "old"
        subprocess.run(["git", "-C", str(common.REPO), "worktree", "add", "--detach", str(old), args.rev],
                       check=True, capture_output=True)
        sides.append((args.rev, old))
    print("| files | side | first plan peak RSS (MiB) | rerun plan peak RSS (MiB) |\n| --- | --- | --- | --- |")
    try:
        for m in sorted(args.multiples):
            n = args.files * m
            root = work / f"x{m}"
            write_corpus(root, n)
            config = work / f"x{m}.yaml"
            config.write_text(f"collection: plan_x{m}\ninput:\n  roots: [{str(root)!r}]\n")
            plan = [sys.executable, "-m", "jobs.cli", "plan", "--config", str(config), "--json"]
            first = {name: peak(plan, dict(env, PYTHONPATH=str(cwd)), cwd) for name, cwd in sides}
            seed(config, env)
            rerun = {name: peak(plan, dict(env, PYTHONPATH=str(cwd)), cwd) for name, cwd in sides}
            said = json.loads(subprocess.run(plan, cwd=common.REPO, env=env, check=True, capture_output=True,
                                             text=True).stdout)
            if (said["skip"], said["read"]) != (n, 0):
                raise RuntimeError(f"the rerun plan is not a rerun: {said['skip']} skipped, {said['read']} read of {n}")
            for name, _ in sides:
                print(f"| {n:,} | {name} | {first[name]:,} | {rerun[name]:,} |", flush=True)
            shutil.rmtree(root)
    finally:
        subprocess.run([str(common.BIN / "corpusmill"), "db", "stop"], env=env, capture_output=True)
        if args.rev:
            subprocess.run(["git", "-C", str(common.REPO), "worktree", "remove", "--force", str(work / "old")],
                           capture_output=True)
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
