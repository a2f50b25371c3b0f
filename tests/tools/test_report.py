"""The QA report over a constructed run directory: real Parquet in the contract schema, run.json, metrics.json
and errors.parquet, as an ingest run leaves them; nothing of the report module is mocked."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jobs.store.parquet import contract_schema
from jobs.tools.report import _index_rows, write_report

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
RUN_ID = "20250101-120000-abcd"
FAILED_PATH = "broken/budget 2024.xlsx"
FAILED_MESSAGE = "File is not a zip file (at excel.py:41)"
PLOTS = ("tokens_by_source_type.png", "quality_labels.png", "chunks_per_file.png")


def chunk(n: int, source: str, source_type: str, text: str, tokens: int, words: int, tags: list[str],
          quality: str = "ok", omit_reason: str | None = None, heading: list[str] | None = None) -> dict:
    omitted = omit_reason is not None
    return {
        "chunk_id": f"c{n:03d}", "collection": "notes", "doc_id": f"doc-{source}", "source_path": source,
        "source_type": source_type, "heading_path": heading or [Path(source).stem],
        "breadcrumb": " › ".join(heading or [Path(source).stem]), "text": text, "embed_text": text, "seq": n,
        "char_start": 0, "char_end": len(text), "sheet": "Sheet1" if source_type == "excel" else None,
        "row": n if source_type == "excel" else None, "tags": tags, "token_count": tokens, "word_count": words,
        "quality": quality, "omitted": omitted, "omit_reason": omit_reason, "text_sha256": f"sha{n}",
        "pipeline_fingerprint": "fp-1234", "run_id": RUN_ID,
        "embedding": None if omitted else [0.1, 0.2, 0.3, 0.4], "embedding_model": "all-MiniLM-L6-v2",
    }


def make_rows() -> list[dict]:
    rows = [
        # guide.md: 4 chunks
        chunk(1, "docs/guide.md", "markdown", "Install the package with pip and configure the database URL. " * 3,
              60, 30, ["h2", "p"], heading=["Guide", "Install"]),
        chunk(2, "docs/guide.md", "markdown", "Use <b>bold</b> & friends carefully.", 10, 6, ["h2", "p"],
              quality="fragment", heading=["Guide", "Markup"]),
        chunk(3, "docs/guide.md", "markdown", "- step one\n- step two\n- step three " * 5, 90, 45, ["h3", "list"]),
        chunk(4, "docs/guide.md", "markdown", "See above.", 3, 2, ["p"], quality="context_dead",
              omit_reason="context_dead: opens with 'see above' and has 2 words"),
        # faq.md: 2 chunks
        chunk(5, "docs/faq.md", "markdown", "def main():\n    return 42\n" * 40, 600, 520, ["code", "h2"],
              quality="too_long"),
        chunk(6, "docs/faq.md", "markdown", "Short answer about limits.", 20, 20, ["p"], quality="short"),
        # sheet.xlsx: 3 chunks
        chunk(7, "data/sheet.xlsx", "excel", "Name: Ada | Role: Engineer | Team: Core", 14, 6, ["row"]),
        chunk(8, "data/sheet.xlsx", "excel", "Name: Bob | Role: Analyst | Team: Data", 14, 6, ["row"]),
        chunk(9, "data/sheet.xlsx", "excel", "x", 1, 1, ["row"], quality="fragment", omit_reason="fragment: 1 words < 3"),
        # notes.md: 1 chunk
        chunk(10, "notes.md", "markdown", "A normal paragraph with enough words to be ok. " * 4, 44, 40, ["p"]),
    ]
    return rows


def make_run(tmp_path: Path, rows: list[dict] | None, with_metrics: bool = True) -> Path:
    run_dir = tmp_path / RUN_ID
    (run_dir / "qa").mkdir(parents=True)
    if rows is not None:
        (run_dir / "chunks").mkdir()
        pq.write_table(pa.Table.from_pylist(rows, schema=contract_schema(4)), run_dir / "chunks" / "part-00000.parquet")
    (run_dir / "run.json").write_text(json.dumps({
        "run_id": RUN_ID, "collection": "notes", "fingerprint": "fp-1234",
        "plan": {"add": 5, "update": 0, "retry": 0, "skip": 0, "delete": 0},
        "config": {"chunking": {"max_tokens": 256}},
    }), encoding="utf-8")
    if with_metrics:
        n = len(rows or [])
        (run_dir / "qa" / "metrics.json").write_text(json.dumps({
            "files": {"add": 5, "update": 0, "retry": 0, "skip": 0, "delete": 0, "done": 4 if n else 0, "empty": 0,
                      "failed": 1},
            "chunks": {"total": n},
            "failures": [],
        }), encoding="utf-8")
    schema = pa.schema([(k, pa.string()) for k in ("source_path", "stage", "error_class", "message")])
    pq.write_table(pa.Table.from_pylist([{"source_path": FAILED_PATH, "stage": "parse", "error_class": "BadZipFile",
                                          "message": FAILED_MESSAGE}], schema=schema), run_dir / "errors.parquet")
    return run_dir


@pytest.fixture()
def run_dir(tmp_path) -> Path:
    return make_run(tmp_path, make_rows())


def test_writes_every_artifact(run_dir):
    metrics_before = (run_dir / "qa" / "metrics.json").read_text()
    written = write_report(run_dir, sample_size=3, seed=7)
    expected = {"breakdown.json", "sample.jsonl", "flagged.json", "flagged.csv", "report.html", *PLOTS}
    assert set(written) == expected
    for name, path in written.items():
        assert path == run_dir / "qa" / name and path.is_file() and path.stat().st_size > 0
    for name in PLOTS:
        assert written[name].read_bytes().startswith(PNG_SIGNATURE)
    assert (run_dir / "qa" / "metrics.json").read_text() == metrics_before


def test_breakdown_matches_the_data(run_dir):
    b = json.loads(write_report(run_dir)["breakdown.json"].read_text())
    assert {k: b["totals"][k] for k in ("chunks", "embedded", "omitted", "files", "flagged")} == {
        "chunks": 10, "embedded": 8, "omitted": 2, "files": 4, "flagged": 5}
    md, xl = b["by_source_type"]["markdown"], b["by_source_type"]["excel"]
    assert (md["chunks"], md["embedded"], md["omitted"]) == (7, 6, 1)
    assert md["tokens_mean"] == round((60 + 10 + 90 + 3 + 600 + 20 + 44) / 7, 1)
    assert md["tokens_median"] == 44
    assert md["words_median"] == 30
    assert (xl["chunks"], xl["tokens_median"], xl["words_mean"]) == (3, 14, round(13 / 3, 1))
    assert {t: g["chunks"] for t, g in b["by_tag"].items()} == {"p": 5, "row": 3, "h2": 3, "code": 1, "h3": 1, "list": 1}
    assert b["by_tag"]["h2"]["tokens_median"] == 60
    assert {q: g["chunks"] for q, g in b["by_quality"].items()} == {
        "ok": 5, "short": 1, "fragment": 2, "too_long": 1, "context_dead": 1}
    assert b["by_quality"]["fragment"] == {"chunks": 2, "embedded": 1, "omitted": 1}
    assert b["omitted_by_reason"] == {"context_dead": 1, "fragment": 1}
    assert b["chunks_per_file"] == {"files": 4, "n": 4, "min": 1, "median": 2.5, "mean": 2.5, "p95": 4, "max": 4}


def test_flagged_json_and_csv(run_dir):
    written = write_report(run_dir)
    flagged = json.loads(written["flagged.json"].read_text())
    assert sorted(f["chunk_id"] for f in flagged) == ["c002", "c004", "c005", "c006", "c009"]
    too_long = next(f for f in flagged if f["chunk_id"] == "c005")
    assert len(too_long["text_preview"]) == 300 and too_long["word_count"] == 520
    with written["flagged.csv"].open(encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(flagged) == 5
    markup = next(r for r in rows if r["chunk_id"] == "c002")
    assert markup["heading_path"] == "Guide › Markup"
    assert (markup["quality"], markup["omitted"]) == ("fragment", "False")
    dead = next(r for r in rows if r["chunk_id"] == "c004")
    assert dead["omit_reason"].startswith("context_dead:") and dead["omitted"] == "True"


def test_sample_is_seeded_and_embedded_only(run_dir, tmp_path):
    def sample(seed: int) -> list[dict]:
        path = write_report(run_dir, sample_size=4, seed=seed)["sample.jsonl"]
        return [json.loads(line) for line in path.read_text().splitlines()]

    first = sample(3)
    assert len(first) == 4 and first == sample(3)
    assert set(first[0]) >= {"source_path", "heading_path", "quality", "token_count", "text"}
    assert all(s["chunk_id"] not in ("c004", "c009") for s in first)
    assert any(sample(seed) != first for seed in range(4, 10))
    # Larger than the pool: every embedded chunk, once.
    everything = [json.loads(x) for x in write_report(run_dir, sample_size=100)["sample.jsonl"].read_text().splitlines()]
    assert len(everything) == 8 and len({s["chunk_id"] for s in everything}) == 8

    # The same chunks written into parts in another order give the same sample (a part holds whole documents).
    rows = make_rows()
    other = make_run(tmp_path / "shuffled", None)
    (other / "chunks").mkdir()
    pq.write_table(pa.Table.from_pylist(rows[6:], schema=contract_schema(4)), other / "chunks" / "part-00000.parquet")
    pq.write_table(pa.Table.from_pylist(rows[:6][::-1], schema=contract_schema(4)), other / "chunks" / "part-00001.parquet")
    again = write_report(other, sample_size=4, seed=3)["sample.jsonl"].read_text().splitlines()
    assert [json.loads(x) for x in again] == first


def test_counts_what_the_database_committed_each_chunk_once_in_its_latest_version(run_dir):
    # A resumed run (or a retried task) wrote guide.md again in a later part, now two chunks, c001 twice; and
    # a part holds the rows of the document the database then refused (errors.parquet names it).
    again = [chunk(1, "docs/guide.md", "markdown", "Install it with pip.", 5, 4, ["p"]),
             chunk(1, "docs/guide.md", "markdown", "Install it with uv, then configure the database.", 9, 8, ["p"]),
             chunk(3, "docs/guide.md", "markdown", "- step one\n- step two", 8, 6, ["list"])]
    refused = [chunk(11, FAILED_PATH, "excel", "Budget | 2024", 3, 3, ["row"], quality="fragment")]
    pq.write_table(pa.Table.from_pylist(again + refused, schema=contract_schema(4)),
                   run_dir / "chunks" / "part-00001-0000-0a1b2c3d.parquet")
    written = write_report(run_dir, sample_size=100)
    b = json.loads(written["breakdown.json"].read_text())
    # guide.md's 4 chunks are its 2 now; faq.md 2, sheet.xlsx 3 (one omitted), notes.md 1.
    assert {k: b["totals"][k] for k in ("chunks", "embedded", "omitted", "files", "flagged")} == {
        "chunks": 8, "embedded": 7, "omitted": 1, "files": 4, "flagged": 3}
    sample = [json.loads(x) for x in written["sample.jsonl"].read_text().splitlines()]
    assert sorted(s["chunk_id"] for s in sample) == ["c001", "c003", "c005", "c006", "c007", "c008", "c010"]
    assert next(s["text"] for s in sample if s["chunk_id"] == "c001").startswith("Install it with uv")
    flagged = json.loads(written["flagged.json"].read_text())
    assert sorted(f["chunk_id"] for f in flagged) == ["c005", "c006", "c009"]


def test_html_is_self_contained_and_escaped(run_dir):
    page = write_report(run_dir, sample_size=20)["report.html"].read_text(encoding="utf-8")
    assert RUN_ID in page and "fp-1234" in page and "notes" in page
    assert FAILED_PATH in page and FAILED_MESSAGE in page and "parse" in page
    assert "Flagged chunks (5)" in page
    assert page.count("data:image/png;base64,") == 3
    assert "<script" not in page.lower()
    assert 'src="http' not in page and "<link" not in page
    # The chunk text "Use <b>bold</b> & friends" shows as text, never as markup.
    assert "Use &lt;b&gt;bold&lt;/b&gt; &amp; friends" in page
    assert "<b>bold</b>" not in page
    assert "configured max_tokens (256)" in page


def test_flagged_table_is_capped_with_a_note(tmp_path):
    rows = [chunk(n, f"f{n % 7}.md", "markdown", f"tiny {n}", 2, 2, ["p"], quality="fragment") for n in range(1, 61)]
    page = write_report(make_run(tmp_path, rows))["report.html"].read_text(encoding="utf-8")
    assert "Flagged chunks (60)" in page
    assert "Showing the first 50 of 60 flagged chunks" in page


def test_empty_run_without_parts(tmp_path):
    run_dir = make_run(tmp_path, None)
    written = write_report(run_dir)
    assert not any(name in written for name in PLOTS)
    assert not any((run_dir / "qa" / name).exists() for name in PLOTS)
    page = written["report.html"].read_text(encoding="utf-8")
    assert RUN_ID in page and "produced no chunks" in page and "Plots skipped" in page
    assert FAILED_PATH in page
    assert json.loads(written["breakdown.json"].read_text())["totals"]["chunks"] == 0
    assert json.loads(written["flagged.json"].read_text()) == []
    assert written["sample.jsonl"].read_text() == ""
    assert written["flagged.csv"].read_text().count("\n") == 1  # header only


def test_empty_run_with_zero_row_part_and_no_metrics(tmp_path):
    run_dir = make_run(tmp_path, [], with_metrics=False)
    assert pq.read_table(run_dir / "chunks").num_rows == 0
    written = write_report(run_dir)
    assert "report.html" in written and "tokens_by_source_type.png" not in written
    assert "produced no chunks" in written["report.html"].read_text(encoding="utf-8")


def test_report_shows_index_health_and_gate_failures(run_dir):
    metrics_path = run_dir / "qa" / "metrics.json"
    metrics = json.loads(metrics_path.read_text())
    assert "Not measured" in write_report(run_dir)["report.html"].read_text(encoding="utf-8")
    metrics |= {"index": {"vectors": 10, "empty_vector_rate": 0.0, "duplicate_neighbour_rate": 0.2, "method": "exact",
                          "near_duplicate_cosine": 0.995, "tokens": {"median": 50, "p95": 90, "max": 100},
                          "near_zero_share": 0.0, "at_limit_share": 0.1, "warnings": ["a pile at the limit"]},
                "gates": [{"message": "duplicate_neighbour_rate 0.200 exceeds max_duplicate_neighbour_rate 0.010 by 0.190"}]}
    metrics_path.write_text(json.dumps(metrics), encoding="utf-8")
    page = write_report(run_dir)["report.html"].read_text(encoding="utf-8")
    assert "duplicate-neighbour rate (cosine &gt; 0.995)" in page and "20.00% (exact)" in page
    assert "50 / 90 / 100" in page and "a pile at the limit" in page
    assert "Gate failed: duplicate_neighbour_rate 0.200 exceeds" in page
    assert "Not measured" not in page and "Every configured quality gate passed" not in page


def test_markup_in_run_data_is_escaped_everywhere_it_shows(tmp_path):
    """Chunk text, file names, headings, omit reasons, failure messages and skipped links all come from the
    corpus; the page must show them as text, whichever section they land in."""
    evil = "<script>alert(1)</script> & co"
    shown = "&lt;script&gt;alert(1)&lt;/script&gt; &amp; co"
    rows = [chunk(1, f"docs/{evil}.md", "markdown", f"body {evil} " * 3, 30, 12, ["p"], heading=[evil]),
            chunk(2, f"docs/{evil}.md", "markdown", f"tail {evil}", 3, 2, ["p"], quality="fragment",
                  omit_reason=f"fragment: {evil}", heading=[evil])]
    run_dir = make_run(tmp_path, rows)
    pq.write_table(pa.Table.from_pylist([{"source_path": f"broken/{evil}.xlsx", "stage": "parse", "error_class": "X",
                                          "message": f"bad {evil}"}]), run_dir / "errors.parquet")
    metrics_path = run_dir / "qa" / "metrics.json"
    metrics = json.loads(metrics_path.read_text())
    metrics["discovery"] = {"skipped_links": [{"path": f"{evil}.md", "reason": "broken_link", "target": evil,
                                               "root": "/r"}]}
    metrics_path.write_text(json.dumps(metrics), encoding="utf-8")

    page = write_report(run_dir, sample_size=5)["report.html"].read_text(encoding="utf-8")
    assert "<script" not in page.lower() and "alert(1)</script>" not in page
    assert f"docs/{shown}.md<br>" in page  # flagged table: source path
    assert f'<span class="note">{shown}</span>' in page  # flagged table: heading path
    assert f"fragment: {shown}</td>" in page  # omit reason
    assert f"tail {shown}</div>" in page  # flagged text preview
    assert f"body {shown}" in page and f"docs/{shown}.md · {shown} · " in page  # the sample card
    assert f"broken/{shown}.xlsx</td>" in page and f"bad {shown}</div>" in page  # failed files
    assert f"<code>{shown}.md</code>" in page and f"<code>{shown}</code>" in page  # skipped in discovery
    # Our own markup still renders as markup.
    assert page.count("data:image/png;base64,") == 3 and '<span class="badge' in page


def test_the_report_says_which_index_figures_come_from_a_sample():
    index = {"vectors": 1_000_000, "empty_vector_rate": 0.0, "duplicate_neighbour_rate": 0.004, "method": "hnsw",
             "near_duplicate_cosine": 0.995, "tokens": {"median": 120, "p95": 240, "max": 256},
             "near_zero_share": 0.01, "at_limit_share": None,
             "sampled": {"rows": 20_013, "figures": ["empty_vectors", "tokens"], "duplicate_probes": 5_004}}
    rows = dict(_index_rows(index))
    assert rows["vectors"] == "1,000,000"  # exact: no sample named
    assert "empty vector rate (sample of 20,013 chunks)" in rows
    assert "duplicate-neighbour rate (cosine > 0.995) (sample of 5,004 chunks)" in rows
    exact = dict(_index_rows(index | {"sampled": {"rows": None, "figures": [], "duplicate_probes": None}}))
    assert "empty vector rate" in exact and not any("sample" in k for k in exact)
