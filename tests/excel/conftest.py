"""What the Excel tests share: the test workbooks, a work row for one, the stage run on it, and a
builder for small workbooks written on the spot."""

from __future__ import annotations

from pathlib import Path

import openpyxl
import pytest

from jobs.config import ExcelConfig, QualityConfig
from jobs.excel.stage import excel_to_chunks
from tests.conftest import CORPUS, REPO

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
BOOK = CORPUS / "workbooks" / "stanley-cups.xlsx"
XLSX = REPO / "tests" / "data" / "xlsx"
READXL, UNSTRUCTURED, STATS = XLSX / "readxl", XLSX / "unstructured", XLSX / "stats"
TEMPLATES = REPO / "configs" / "templates"


def work(path: Path, source_path: str | None = None) -> dict:
    return {"doc_id": "d1", "collection": "t", "source_path": source_path or path.name, "abs_path": str(path),
            "source_type": "excel", "content_sha256": "s", "pipeline_fingerprint": "fp", "run_id": "r"}


@pytest.fixture()
def plain(tmp_path) -> ExcelConfig:
    """Excel settings with no templates, so every row takes the `Header: value` fallback."""
    return ExcelConfig(templates_dir=tmp_path / "no-templates")


def chunks(path: Path, excel: ExcelConfig, **quality) -> list[dict]:
    """The stage's rows for one workbook, which must read without an error."""
    rows = excel_to_chunks([work(path)], excel=excel, quality=QualityConfig(**quality), embedding_model=MODEL)
    errors = [r for r in rows if r.get("error_stage")]
    assert not errors, errors
    return rows


def on_sheet(rows: list[dict], sheet: str) -> list[dict]:
    return [r for r in rows if r.get("sheet") == sheet]


def book(path: Path, rows_by_sheet: dict, formats: dict | None = None) -> Path:
    """A workbook with a sheet per key, its rows appended in order; `formats`: {sheet: {cell: number format}}."""
    wb = openpyxl.Workbook()
    wb.remove(wb.active)
    for name, rows in rows_by_sheet.items():
        ws = wb.create_sheet(name)
        for r in rows:
            ws.append(r)
        for ref, fmt in (formats or {}).get(name, {}).items():
            ws[ref].number_format = fmt
    wb.save(path)
    return path
