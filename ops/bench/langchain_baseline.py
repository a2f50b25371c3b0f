"""corpusmill against what users would pick instead: a typical LangChain-style script.

    python -m ops.bench.langchain_baseline                  # the whole benchmark
    python -m ops.bench.langchain_baseline run DIR TABLE    # the script alone (one JSON line)
    python -m ops.bench.langchain_baseline eval TABLE GOLDEN

The script does what a LangChain tutorial does: read each Markdown file, `MarkdownHeaderTextSplitter`
(#, ##, ### kept in the text) then `RecursiveCharacterTextSplitter` (1000 characters, 200 overlap),
embed the chunks with sentence-transformers (the same all-MiniLM-L6-v2, its default batch size 32),
and INSERT them one row at a time into a pgvector table (one transaction; no index, as PGVector leaves it).

Measured: wall time of both on the same corpus (the bench corpus with its front matter descriptions
held out, ops/bench/described.py), retrieval quality of both on that corpus with the held-out
descriptions as questions and their pages as answers (document level), and on XQuAD (48 articles as
Markdown, 1,190 questions, passage level): corpusmill through `corpusmill eval --exact`, the script's
table through the same scoring code (jobs.tools.evaluate) with the same query embedding and an exact
cosine scan, so the two differ only in their chunks.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from ops.bench import common

CHUNK_SIZE, CHUNK_OVERLAP = 1000, 200
HEADERS = [("#", "Header 1"), ("##", "Header 2"), ("###", "Header 3")]


def _model():
    from sentence_transformers import SentenceTransformer

    from jobs.embed.models import resolve_model

    return SentenceTransformer(resolve_model(common.MODEL).location, device="cpu")


def run_script(input_dir: str, table: str, database_url: str) -> dict:
    """The LangChain-style script itself (timed per step)."""
    t_start = time.perf_counter()
    steps: dict[str, float] = {}
    from langchain_text_splitters import MarkdownHeaderTextSplitter, RecursiveCharacterTextSplitter

    root = Path(input_dir)
    t0 = time.perf_counter()
    header_splitter = MarkdownHeaderTextSplitter(headers_to_split_on=HEADERS, strip_headers=False)
    splitter = RecursiveCharacterTextSplitter(chunk_size=CHUNK_SIZE, chunk_overlap=CHUNK_OVERLAP)
    chunks = []
    for path in common.markdown_files(root):
        sections = header_splitter.split_text(path.read_text(encoding="utf-8", errors="replace"))
        for doc in splitter.split_documents(sections):
            chunks.append({"source": str(path.relative_to(root)), "content": doc.page_content,
                           "metadata": doc.metadata})
    steps["split"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    model = _model()
    steps["model_load"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    vectors = model.encode([c["content"] for c in chunks], normalize_embeddings=True, show_progress_bar=False)
    steps["encode"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    import psycopg
    from pgvector.psycopg import register_vector
    from psycopg import sql

    with psycopg.connect(database_url) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        conn.execute("CREATE SCHEMA IF NOT EXISTS bench")
        register_vector(conn)
        ident = sql.Identifier("bench", table)
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(ident))
        conn.execute(sql.SQL("CREATE TABLE {} (id bigserial PRIMARY KEY, source text, content text, metadata jsonb, "
                             "embedding vector({}))").format(ident, sql.Literal(int(vectors.shape[1]))))
        insert = sql.SQL("INSERT INTO {} (source, content, metadata, embedding) VALUES (%s, %s, %s, %s)").format(ident)
        for c, v in zip(chunks, vectors):
            conn.execute(insert, (c["source"], c["content"], json.dumps(c["metadata"]), v))
        conn.commit()
    steps["insert"] = time.perf_counter() - t0
    steps["total_in_process"] = time.perf_counter() - t_start

    lengths = [len(x) for x in model.tokenizer([c["content"] for c in chunks])["input_ids"]]
    limit = model.max_seq_length
    return {"steps": {k: round(v, 3) for k, v in steps.items()}, "chunks": len(chunks),
            "mean_tokens": round(sum(lengths) / max(len(lengths), 1), 1),
            "over_model_limit": sum(1 for n in lengths if n > limit), "model_limit": limit}


def evaluate_table(table: str, golden: str, database_url: str) -> dict:
    """recall@1/5/10 and MRR of the script's table, scored by jobs.tools.evaluate (exact cosine scan)."""
    import numpy as np
    import psycopg
    from pgvector.psycopg import register_vector
    from psycopg import sql

    from jobs.tools.evaluate import evaluate, load_golden

    model = _model()
    stmt = sql.SQL("SELECT id, source, content, 1 - (embedding <=> %s) FROM {} ORDER BY embedding <=> %s LIMIT %s").format(
        sql.Identifier("bench", table))
    with psycopg.connect(database_url) as conn:
        register_vector(conn)

        def search(queries: list[str], k: int) -> list[list[dict]]:
            out = []
            for v in model.encode(queries, normalize_embeddings=True, show_progress_bar=False, batch_size=64):
                v = np.asarray(v, dtype=np.float32)
                out.append([{"chunk_id": str(r[0]), "source_path": r[1], "text": r[2], "score": float(r[3])}
                            for r in conn.execute(stmt, (v, v, k))])
            return out

        return evaluate(load_golden(golden), search).to_dict()


def _quality_row(name: str, chunks: int | None, ev: dict) -> list:
    p = ev["by_level"].get("passage", {})
    d = ev["by_level"].get("document", {})
    return [name, chunks, p.get("recall@1"), p.get("recall@5"), p.get("recall@10"), p.get("mrr"), d.get("recall@1")]


def bench() -> dict:
    from ops.bench import described

    common.database_url()  # start the embedded server before the subprocesses use it
    files_n = common.bench_files()
    src, files = common.corpus(files_n, "overhead")
    # Speed and structured-corpus quality from the same two runs: the corpus with its front matter
    # descriptions held out as questions (ops/bench/described.py).
    held_out = described.build(src, common.work_dir() / "described")
    root = Path(held_out["corpus"])
    cm = common.ingest(root, "bench_lc_cm", tag="langchain-cm")
    cm_desc = common.corpusmill_eval("bench_lc_cm", held_out["golden"])
    lc = common.python("ops.bench.langchain_baseline", "run", str(root), "lc_corpus",
                       log=common.out_dir() / "langchain.run.log")
    lc_desc = common.python("ops.bench.langchain_baseline", "eval", "lc_corpus", held_out["golden"])
    lc_desc.pop("wall_s", None)

    # Retrieval quality on XQuAD.
    from jobs.tools.evaluate import squad_to_markdown

    xdir = common.work_dir() / "xquad-md"
    squad_to_markdown(common.xquad_path(), xdir)
    cm_x = common.ingest(xdir, "bench_xquad", tag="langchain-xquad")
    cm_eval = common.corpusmill_eval("bench_xquad", str(common.xquad_path()))
    lc_x = common.python("ops.bench.langchain_baseline", "run", str(xdir), "lc_xquad",
                         log=common.out_dir() / "langchain.xquad.log")
    lc_eval = common.python("ops.bench.langchain_baseline", "eval", "lc_xquad", str(common.xquad_path()))
    lc_eval.pop("wall_s", None)
    return {
        "corpus": str(src), "files": len(files), "machine": common.machine(), "database_url_kind": "embedded",
        "corpusmill": {"wall_s": round(cm["wall_s"], 2), "source": "own run, descriptions held out"},
        "langchain": {"wall_s": round(lc["wall_s"], 2), **{k: v for k, v in lc.items() if k != "wall_s"}},
        "ratio_corpusmill_over_langchain": round(cm["wall_s"] / lc["wall_s"], 3),
        "described": {
            "questions": cm_desc["n"], "held_out": held_out,
            "corpusmill": {"chunks": cm["metrics"]["chunks"]["embedded"],
                           "eval": {k: v for k, v in cm_desc.items() if k != "hits_file"}},
            "langchain": {"chunks": lc["chunks"], "eval": lc_desc},
        },
        "xquad": {
            "questions": cm_eval["n"],
            "corpusmill": {"chunks": cm_x["metrics"]["chunks"]["embedded"], "wall_s": round(cm_x["wall_s"], 2),
                           "eval": {k: v for k, v in cm_eval.items() if k != "hits_file"}},
            "langchain": {"chunks": lc_x["chunks"], "wall_s": round(lc_x["wall_s"], 2),
                          "over_model_limit": lc_x["over_model_limit"], "eval": lc_eval},
        },
    }


def _document_row(name: str, chunks: int | None, ev: dict) -> list:
    d = ev["by_level"].get("document", {})
    return [name, chunks, d.get("recall@1"), d.get("recall@5"), d.get("recall@10"), d.get("mrr")]


def report(r: dict) -> str:
    lc, cm = r["langchain"], r["corpusmill"]
    speed = common.table(
        ["pipeline", "seconds", "chunks", "split", "encode", "load"],
        [["corpusmill ingest", cm["wall_s"], None, None, None, None],
         ["LangChain-style script", lc["wall_s"], lc["chunks"], lc["steps"]["split"], lc["steps"]["encode"],
          lc["steps"]["insert"]]],
        f"Against a LangChain-style script: {r['files']} files of {r['corpus']} (descriptions held out)")
    d = r["described"]
    structured = common.table(
        ["pipeline", "chunks", "document R@1", "R@5", "R@10", "MRR"],
        [_document_row("corpusmill (configs/local.yaml)", d["corpusmill"]["chunks"], d["corpusmill"]["eval"]),
         _document_row("LangChain-style script", d["langchain"]["chunks"], d["langchain"]["eval"])],
        f"Retrieval on the same corpus: {d['questions']} page descriptions as questions, the page as the answer")
    x = r["xquad"]
    quality = common.table(
        ["pipeline", "chunks", "passage R@1", "R@5", "R@10", "MRR", "document R@1"],
        [_quality_row("corpusmill (configs/local.yaml)", x["corpusmill"]["chunks"], x["corpusmill"]["eval"]),
         _quality_row("LangChain-style script", x["langchain"]["chunks"], x["langchain"]["eval"])],
        f"Retrieval on XQuAD ({x['questions']} questions, exact cosine scan, same embedder)")
    return (speed + f"\nratio corpusmill/LangChain-style = {r['ratio_corpusmill_over_langchain']:.2f} "
            f"(LangChain-style chunks over the model's {lc['model_limit']}-token window: {lc['over_model_limit']} "
            f"of {lc['chunks']}, their tails never embedded)\n" + structured + "\n" + quality + "\n")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "run":
        print(json.dumps(run_script(argv[1], argv[2], common.database_url())))
        return 0
    if argv and argv[0] == "eval":
        print(json.dumps(evaluate_table(argv[1], argv[2], common.database_url())))
        return 0
    return common.run_one("langchain", bench, report)


if __name__ == "__main__":
    sys.exit(main())
