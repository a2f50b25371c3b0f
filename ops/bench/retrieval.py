"""`make eval`: retrieval of the default config against `configs/baseline-naive.yaml` and the
LangChain-style script on every dev set, at every level a set has, in one table.

    python -m ops.bench.retrieval            # EVAL_SETS=hugo,powershell,xquad,openshift (the default)
    EVAL_SETS=xquad python -m ops.bench.retrieval      # one set (about 3 minutes here)
    BENCH_HOME=DIR EVAL_REUSE=1 python -m ops.bench.retrieval   # search again what DIR's run ingested

EVAL_REUSE=1 evaluates the collections and script tables a run with the same BENCH_HOME left behind
instead of ingesting again (a search-side change needs no new chunks); a set that lacks one is
ingested as usual.

The sets (none of them written here; never tune on one alone):
  hugo        hugo-docs `content/`: each page's front matter description held out as its question, the
              page as the answer (ops/bench/described.py), page level
  powershell  PowerShell-Docs `docs-conceptual/`, the same kind of set, page level
  xquad       XQuAD (en): 48 articles as Markdown, 1,190 questions, passage level (and page)
  openshift   openshift-docs: 400 converted product-doc pages, 352 questions, page level (its
              `reference_answer` is generated text, so it is no passage target)

Each set is ingested once per config (collections `eval_<set>_default` and `eval_<set>_naive`) and
searched as `corpusmill eval --exact` searches: the config's `database.search_mode`, its vector
ranking by an exact scan. The LangChain-style script (ops/bench/langchain_baseline.py) chunks and
embeds the same files with the same model and is searched by exact cosine too, so the three differ
in their chunks (and corpusmill's search mode), not in an index's luck: an HNSW graph is built in
the order rows arrive, and its approximate tail moves fused ranks by a dozen questions of 680 from
one ingest of the same chunks to the next. The default's figures through the index (as `search`
runs) are printed beside, as its own line. A page hit means a returned chunk
comes from the gold page; a passage hit, that a returned chunk holds the answer text. Writes
BENCH_OUT/retrieval.json. The whole table takes 41 to 60 minutes in one go on 2 cores; one set,
3 (XQuAD) to 20 (openshift-docs) minutes.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ops.bench import common

SETS = ("hugo", "powershell", "xquad", "openshift")
CONFIGS = {"default": common.REPO / "configs" / "local.yaml",
           "naive": common.REPO / "configs" / "baseline-naive.yaml"}
PIPELINES = ("default", "naive", "langchain", "index")  # index: the default's collection through its HNSW index
LABELS = {"default": "corpusmill (local.yaml)", "naive": "baseline-naive", "langchain": "LangChain-style",
          "index": "corpusmill, HNSW index"}


def chosen_sets() -> list[str]:
    raw = os.environ.get("EVAL_SETS", "").strip()
    names = [s.strip() for s in raw.split(",") if s.strip()] if raw else list(SETS)
    unknown = [s for s in names if s not in SETS]
    if unknown:
        raise SystemExit(f"EVAL_SETS: unknown set(s) {', '.join(unknown)} (known: {', '.join(SETS)})")
    return names


def prepare(name: str, work: Path, shared: Path | None = None) -> dict:
    """The corpus directory and golden file of a dev set (built under `work` where it needs building) from
    `shared` (default: BENCH_DATA)."""
    from ops.bench import described

    shared = shared or common.data_dir()

    if name == "hugo":
        return described.build(shared / "hugo-docs" / "content", work / "hugo-described")
    if name == "powershell":
        return described.build(shared / "powershell-docs" / "docs-conceptual", work / "powershell-described")
    if name == "xquad":
        from jobs.tools.evaluate import squad_to_markdown

        xquad = shared / "xquad-en" / "xquad.en.json"
        squad_to_markdown(xquad, work / "xquad-md")
        return {"corpus": str(work / "xquad-md"), "golden": str(xquad)}
    if name == "openshift":
        root = shared / "openshift-docs"
        return {"corpus": str(root / "corpus"), "golden": str(root / "golden.jsonl")}
    raise ValueError(f"unknown dev set {name!r}")


def _levels(ev: dict) -> dict:
    """{level: {"recall@1": …, "recall@5": …, "recall@10": …, "mrr": …}} of an eval result."""
    return {level: {k: v for k, v in values.items() if k.startswith("recall@") or k == "mrr"}
            for level, values in ev["by_level"].items()}


def offline_levels(questions, hits: list[list[dict]]) -> dict:
    """{level: [hit@1, hit@5, hit@10]} of hits picked offline (one list per question, as `search` returns
    them), scored by `corpusmill eval`'s own evaluate(): for the sweeps over a make eval's collections."""
    from jobs.tools.evaluate import evaluate

    picked = iter(hits)  # evaluate() asks in batches, in question order
    report = evaluate(questions, lambda texts, depth: [next(picked) for _ in texts])
    return {level: [round(s["recall"][k], 3) for k in (1, 5, 10)] for level, s in report.by_level.items()}


def run_set(name: str) -> dict:
    data = prepare(name, common.work_dir())
    corpus, golden = Path(data["corpus"]), data["golden"]
    out: dict = {"corpus": str(corpus), "golden": golden, "pipelines": {}}
    for pipeline, config in CONFIGS.items():
        collection = f"eval_{name}_{pipeline}"
        chunks, wall = (stored_rows(collection=collection) if reusing() else None), None
        if chunks is None:
            print(f"[{name}] ingest {pipeline} ({config.name})", file=sys.stderr, flush=True)
            run = common.ingest(corpus, collection, config=config, tag=f"eval-{name}-{pipeline}")
            chunks, wall = run["metrics"]["chunks"]["embedded"], round(run["wall_s"], 1)
        ev = common.corpusmill_eval(collection, golden, config, exact=True)
        out["pipelines"][pipeline] = {"chunks": chunks, "wall_s": wall, "questions": ev["n"], "levels": _levels(ev)}
        if pipeline == "default":
            out["pipelines"]["index"] = {"chunks": out["pipelines"][pipeline]["chunks"], "questions": ev["n"],
                                         "levels": _levels(common.corpusmill_eval(collection, golden, config, exact=False))}
    table = f"eval_lc_{name}"
    stored = stored_rows(table=table) if reusing() else None
    if stored is None:
        print(f"[{name}] LangChain-style script", file=sys.stderr, flush=True)
        lc = common.python("ops.bench.langchain_baseline", "run", str(corpus), table,
                           log=common.out_dir() / f"eval-{name}-langchain.log")
    else:
        lc = {"chunks": stored, "wall_s": None}
    ev = common.python("ops.bench.langchain_baseline", "eval", table, golden)
    out["pipelines"]["langchain"] = {"chunks": lc["chunks"], "wall_s": lc["wall_s"] and round(lc["wall_s"], 1),
                                     "questions": ev["n"], "levels": _levels(ev),
                                     "over_model_limit": lc.get("over_model_limit")}
    return out


def reusing() -> bool:
    return os.environ.get("EVAL_REUSE", "").strip() not in ("", "0")


def stored_rows(collection: str | None = None, table: str | None = None) -> int | None:
    """Embedded chunks of a collection (or rows of a script's table) an earlier run left in this
    BENCH_HOME; None when there is none."""
    from psycopg import sql

    from jobs.store.pgvector import PgStore

    with PgStore(common.database_url(), "corpusmill") as store:
        if collection is not None:
            coll = store.get_collection(collection)
            if coll is None:
                return None
            ident, where = sql.Identifier(store.schema, coll.chunk_table), sql.SQL(" WHERE NOT omitted")
        else:
            if store.conn.execute("SELECT to_regclass(%s)", (f"bench.{table}",)).fetchone()[0] is None:
                return None
            ident, where = sql.Identifier("bench", table), sql.SQL("")
        return int(store.conn.execute(sql.SQL("SELECT count(*) FROM {}").format(ident) + where).fetchone()[0])


def bench() -> dict:
    common.database_url()
    return {"machine": common.machine(), "sets": {name: run_set(name) for name in chosen_sets()}}


def leads(levels: dict[str, dict], level: str, k: str) -> bool | None:
    """Whether the default is above both baselines at `level` and `k` (None: a baseline lacks it)."""
    try:
        mine = levels["default"][level][k]
        return all(mine > levels[p][level][k] for p in ("naive", "langchain"))
    except KeyError:
        return None


def verdict(levels: dict[str, dict], level: str) -> str:
    """Where the default is above both baselines at `level`: "@1 @5", "@1", "@5" or "neither"."""
    return " ".join(f"@{k}" for k in (1, 5) if leads(levels, level, f"recall@{k}")) or "neither"


def report(r: dict) -> str:
    rows = []
    for name, s in r["sets"].items():
        levels = {p: s["pipelines"][p]["levels"] for p in PIPELINES if p in s["pipelines"]}
        for level in ("document", "passage"):
            if level not in levels.get("default", {}):
                continue
            for p in PIPELINES:
                v = levels.get(p, {}).get(level)
                if v is None:
                    continue
                rows.append([name, "page" if level == "document" else level, LABELS[p], s["pipelines"][p]["chunks"],
                             v.get("recall@1"), v.get("recall@5"), v.get("recall@10"), v.get("mrr")])
            rows.append([name, "page" if level == "document" else level, "default leads at", None,
                         verdict(levels, level), None, None, None])
    return common.table(["set", "level", "pipeline", "chunks", "hit@1", "hit@5", "hit@10", "MRR"], rows,
                        "Retrieval by dev set (the config's search mode for corpusmill, cosine for the script; "
                        "vectors by exact scan unless the line says HNSW index)")


def main(argv: list[str] | None = None) -> int:
    return common.run_one("retrieval", bench, report)


if __name__ == "__main__":
    sys.exit(main())
