"""jobs/chunks/build.py: the one chunk-row builder both chunkers call."""

from jobs.chunks.build import chunk_rows
from jobs.chunks.ids import chunk_id, sha256_text
from jobs.config import QualityConfig
from jobs.rows import CHUNK_SCHEMA

WORK = {"collection": "c", "doc_id": "d1", "source_path": "books/a.xlsx", "pipeline_fingerprint": "fp",
        "run_id": "r1", "content_sha256": "sha"}
PROSE = " ".join(["word"] * 40)


def _draft(text):
    return {"text": text, "heading_path": ["a.xlsx", "Sheet1"], "breadcrumb": "a.xlsx › Sheet1",
            "embed_text": f"a.xlsx › Sheet1\n\n{text}", "sheet": "Sheet1", "row": 2, "tags": ["row"]}


def test_rows_carry_identity_counts_and_the_contract_fields():
    drafts = [_draft(PROSE), _draft("Total: 12")]
    rows = chunk_rows(WORK, drafts, source_type="excel", locators=["books/a.xlsx##Sheet1#2", "books/a.xlsx##Sheet1#3"],
                      token_counts=[45, 4], token_limit=254, quality=QualityConfig(), doc_stats='{"x": 1}')
    assert [r["seq"] for r in rows] == [0, 1] and {r["doc_rows"] for r in rows} == {2}
    assert rows[0]["chunk_id"] == chunk_id("c", "books/a.xlsx##Sheet1#2", sha256_text(PROSE), "fp")
    assert rows[0]["text_sha256"] == sha256_text(PROSE) and rows[0]["word_count"] == 40
    assert rows[0]["token_count"] == 45 and rows[0]["quality"] == "ok" and not rows[0]["omitted"]
    assert [r["doc_stats"] for r in rows] == ['{"x": 1}', None]  # on a document's first row only
    assert {r["row_kind"] for r in rows} == {"chunk"} and rows[1]["sheet"] == "Sheet1"
    assert set(rows[0]) <= set(CHUNK_SCHEMA.names)  # nothing the Arrow schema would drop silently


def test_a_verdict_taken_by_the_source_omits_the_chunk_with_its_reason():
    rows = chunk_rows(WORK, [_draft(PROSE), _draft(PROSE + " more")], source_type="excel",
                      locators=["l0", "l1"], token_counts=[45, 46], token_limit=254, quality=QualityConfig(),
                      doc_stats="{}", verdicts=[("structural", "subtotal row"), None])
    assert (rows[0]["quality"], rows[0]["omitted"], rows[0]["omit_reason"]) == ("structural", True, "subtotal row")
    assert not rows[1]["omitted"]
