import datetime as dt

import pytest

from jobs.config import ExcelConfig, QualityConfig
from jobs.parse.excel import detect_header, excel_to_chunks, format_value, read_workbook, require_defusedxml
from tests.conftest import CORPUS

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
BOOK = CORPUS / "workbooks" / "stanley-cups.xlsx"


def _work(path, source_path):
    return {"doc_id": "d1", "collection": "t", "source_path": source_path, "abs_path": str(path),
            "source_type": "excel", "content_sha256": "s", "pipeline_fingerprint": "fp", "run_id": "r"}


def test_defusedxml_is_installed_and_required():
    require_defusedxml()  # raises if the package is missing
    import defusedxml  # noqa: F401


def test_header_found_below_a_title_row():
    rows = [["Stanley Cups", None, None], ["Team", "Location", "Stanley Cups"], ["Blues", "STL", 1]]
    assert detect_header(rows, 30) == 1


def test_values_render_as_the_workbook_shows_them():
    assert format_value(0.1234, "0.0%") == "12.3%"
    assert format_value(1234567.891, "#,##0.00") == "1,234,567.89"
    assert format_value(13.0) == "13"
    assert format_value(dt.datetime(2024, 5, 1)) == "2024-05-01"
    assert format_value("  spaced   out ") == "spaced out"


def test_real_workbook_rows_carry_their_headers():
    rows = list(read_workbook(str(BOOK), ExcelConfig()))
    sheets = {r[0] for r in rows}
    assert sheets == {"Stanley Cups", "Stanley Cups Since 67"}
    chunks = excel_to_chunks([_work(BOOK, "stanley-cups.xlsx")], excel=ExcelConfig(), quality=QualityConfig(),
                             embedding_model=MODEL)
    texts = [c["text"] for c in chunks]
    assert "Team: Maple Leafs; Location: TOR; Stanley Cups: 13" in texts
    first = chunks[0]
    assert first["heading_path"] == ["stanley-cups.xlsx", "Stanley Cups"]
    assert first["embed_text"].startswith("stanley-cups.xlsx › Stanley Cups\n\n")
    assert first["sheet"] == "Stanley Cups" and first["row"] == 3
    assert all(c["doc_rows"] == len(chunks) for c in chunks)
    assert len({c["chunk_id"] for c in chunks}) == len(chunks)


@pytest.mark.parametrize("payload, expect", [
    (b"this is not a zip archive", "not a zip archive"),
    (b"PK\x03\x04 truncated zip", "not a zip archive"),
])
def test_broken_workbook_becomes_one_error_row(tmp_path, payload, expect):
    bad = tmp_path / "bad.xlsx"
    bad.write_bytes(payload)
    rows = excel_to_chunks([_work(bad, "bad.xlsx"), _work(BOOK, "good.xlsx")], excel=ExcelConfig(),
                           quality=QualityConfig(), embedding_model=MODEL)
    errors = [r for r in rows if r.get("error_stage")]
    assert len(errors) == 1 and errors[0]["source_path"] == "bad.xlsx"
    assert errors[0]["error_stage"] == "parse_excel" and expect in errors[0]["error_message"]
    assert any(r["source_path"] == "good.xlsx" and r["row_kind"] == "chunk" for r in rows)


def test_file_size_limit(tmp_path):
    with pytest.raises(ValueError, match="max_file_bytes"):
        list(read_workbook(str(BOOK), ExcelConfig(max_file_bytes=10)))
