"""jobs.excel.stage: work rows into chunk rows, and one error row for a workbook that cannot be read."""

import shutil

import pytest

from jobs.config import ExcelConfig, QualityConfig
from jobs.excel.stage import excel_to_chunks
from jobs.excel.templates import read_template_texts
from tests.conftest import REPO
from tests.excel.conftest import BOOK, MODEL, chunks, work


def test_a_workbook_becomes_one_chunk_row_per_data_row(plain):
    rows = chunks(BOOK, plain)
    first = rows[0]
    assert first["embed_text"].startswith("stanley-cups.xlsx › Stanley Cups\n\n")
    assert first["sheet"] == "Stanley Cups" and first["row"] == 3
    assert all(c["doc_rows"] == len(rows) for c in rows)
    assert len({c["chunk_id"] for c in rows}) == len(rows)


@pytest.mark.parametrize("payload, expect", [
    (b"this is not a zip archive", "not a zip archive"),
    (b"PK\x03\x04 truncated zip", "not a zip archive"),
])
def test_broken_workbook_becomes_one_error_row(tmp_path, payload, expect):
    bad = tmp_path / "bad.xlsx"
    bad.write_bytes(payload)
    rows = excel_to_chunks([work(bad, "bad.xlsx"), work(BOOK, "good.xlsx")], excel=ExcelConfig(),
                           quality=QualityConfig(), embedding_model=MODEL)
    errors = [r for r in rows if r.get("error_stage")]
    assert len(errors) == 1 and errors[0]["source_path"] == "bad.xlsx"
    assert errors[0]["error_stage"] == "parse_excel" and expect in errors[0]["error_message"]
    assert any(r["source_path"] == "good.xlsx" and r["row_kind"] == "chunk" for r in rows)


def test_a_worker_renders_with_the_template_texts_it_was_shipped_not_its_own_directory(tmp_path):
    shipped = read_template_texts(REPO / "configs" / "templates")
    item = {"doc_id": "d", "collection": "c", "source_path": "stanley-cups.xlsx", "source_type": "excel",
            "content_sha256": "s", "pipeline_fingerprint": "fp", "run_id": "r",
            "abs_path": str(shutil.copy(REPO / "tests/data/corpus/workbooks/stanley-cups.xlsx", tmp_path))}
    # A node where the driver's templates directory does not exist (another machine of the cluster).
    elsewhere = ExcelConfig(templates_dir=tmp_path / "not-on-this-node")
    rows = excel_to_chunks([item], excel=elsewhere, quality=QualityConfig(),
                           embedding_model=MODEL, templates=shipped)
    assert rows and all("template:stanley-cups" in r["tags"] for r in rows if r["row_kind"] == "chunk"), rows[:1]
