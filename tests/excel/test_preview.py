"""jobs.excel.preview: what `corpusmill templates preview` shows of a workbook."""

import pytest

from jobs.config import ExcelConfig, QualityConfig
from jobs.excel.preview import preview
from tests.excel.conftest import READXL, STATS, TEMPLATES


def test_preview_shows_header_template_rows_and_discards(tmp_path):
    out = preview(READXL / "datasets.xlsx", n=2, excel=ExcelConfig(templates_dir=TEMPLATES), quality=QualityConfig())
    assert "datasets.xlsx: 3 sheet(s) read, 0 hidden and 0 chart sheet(s) skipped; 4 template(s)" in out
    assert "== sheet 'mtcars' ==\ntable 1: header row 1; title: —\n" in out
    assert "  why: the first row of short names over typed values (11 column(s))\n" in out
    assert "  header: mpg | cyl | disp | hp | drat | wt | qsec | vs | am | gear | carb\n" in out
    assert "  template: mtcars (datasets.yaml)\n  rows: 32 rendered, 0 discarded\n  first 2 rendered:\n" in out
    assert "    row 3: A car that does 21 miles per US gallon" in out and "row 4:" not in out

    out = preview(READXL / "datasets.xlsx", sheet="chickwts", n=1, excel=ExcelConfig(templates_dir=tmp_path),
                  quality=QualityConfig())
    assert "mtcars" not in out and "template: fallback" in out
    # 4 words a row, under excel.min_words, but records of their table (jobs.excel.records).
    assert "rows: 71 rendered, 0 discarded\n  first 1 rendered:\n    row 2: weight: 179; feed: horsebean\n" in out
    out = preview(READXL / "deaths.xlsx", sheet="arts", n=3, excel=ExcelConfig(templates_dir=tmp_path),
                  quality=QualityConfig())
    assert ("    row 18: min_words: 6 words, fewer than excel.min_words=8; not a record of its table: it starts in "
            "column C (Age), where the table's other rows hold values, not the names they start with\n"
            "      Age: at the; Has kids: bottom,") in out
    with pytest.raises(ValueError, match="no visible sheet named 'nope'; sheets: mtcars, chickwts, quakes"):
        preview(READXL / "datasets.xlsx", sheet="nope", excel=ExcelConfig(), quality=QualityConfig())


def test_preview_says_why_a_template_did_not_match(tmp_path):
    (tmp_path / "cars.yaml").write_text("name: cars\nfile: '*.xlsx'\nsheet: mtcars\ntext: '{model} does {mpg} mpg.'\n")
    out = preview(READXL / "datasets.xlsx", sheet="mtcars", n=1, excel=ExcelConfig(templates_dir=tmp_path),
                  quality=QualityConfig())
    assert "template: fallback" in out and "cars covers this sheet but the header lacks: model" in out


def test_preview_says_how_a_published_tables_header_was_found():
    out = preview(STATS / "ozmarriage-table1.xlsx", n=1, excel=ExcelConfig(), quality=QualityConfig())
    assert "table 1: header row 7;" in out
    assert "  why: the first row of short names over typed values (7 column(s)); 3 header lines joined\n" in out


def test_preview_names_the_sheets_whose_formulas_have_no_computed_value():
    out = preview(STATS / "ozmarriage-table1.xlsx", n=1, excel=ExcelConfig(), quality=QualityConfig())
    assert "sheet 'Table 1': 2 formula cell(s) have no computed value" in out
    assert "open and save the workbook in Excel or LibreOffice to compute them" in out
