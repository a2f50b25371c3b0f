"""jobs.excel.reader: workbooks and CSV files read as row streams, one per visible sheet."""

import json

import openpyxl

from jobs.config import QualityConfig
from jobs.excel.stage import excel_to_chunks
from tests.excel.conftest import BOOK, MODEL, READXL, UNSTRUCTURED, book, chunks, work


def test_cyrillic_headers_and_values(plain):
    rows = chunks(READXL / "Ekaterinburg_IP_9.xlsx", plain)
    first = rows[0]
    assert first["row"] == 5 and first["sheet"] == "СПАРК - Список"
    assert first["text"].startswith("ФИО: Аббасов Илал Газанфар Оглы; Дата регистрации: 27.05.2004; Отрасль: ")
    assert not first["omitted"]


def test_emoji_survive(plain):
    (row,) = chunks(UNSTRUCTURED / "emoji.xlsx", plain)
    assert row["text"] == "Column A: 🤠😅" and row["omit_reason"].startswith("min_fields:")


def test_chart_and_hidden_sheets_are_skipped_and_counted(tmp_path, plain):
    rows = chunks(READXL / "embedded-chartsheet.xlsx", plain)
    assert {r["sheet"] for r in rows} == {"iris", "mtcars", "chickwts", "quakes"}
    assert json.loads(rows[0]["doc_stats"])["excel_chart_sheets_skipped"] == 1

    path = book(tmp_path / "hidden.xlsx", {
        "Visible": [["Name", "Role"], ["Ada Lovelace", "wrote the first published program"]],
        "Secret": [["Name", "Role"], ["Mallory", "should never be indexed"]]})
    wb = openpyxl.load_workbook(path)
    wb["Secret"].sheet_state = "hidden"
    wb.save(path)
    rows = chunks(path, plain)
    assert [r["sheet"] for r in rows] == ["Visible"]
    assert json.loads(rows[0]["doc_stats"])["excel_hidden_sheets_skipped"] == 1


def test_workbook_openpyxl_cannot_parse_becomes_one_error_row(plain):
    rows = excel_to_chunks([work(READXL / "los-angeles-arrests-xlsx.xlsx"), work(BOOK)], excel=plain,
                           quality=QualityConfig(), embedding_model=MODEL)
    (err,) = [r for r in rows if r.get("error_stage")]
    assert err["source_path"] == "los-angeles-arrests-xlsx.xlsx" and err["error_class"] == "UnreadableFile"
    assert err["error_message"].startswith("openpyxl could not read the workbook: IndexError")
    assert "re-save it in Excel" in err["error_message"]
    assert any(r["source_path"] == "stanley-cups.xlsx" and r["row_kind"] == "chunk" for r in rows)


def test_csv_takes_the_same_row_pipeline(tmp_path, plain):
    path = tmp_path / "passes.csv"
    path.write_text("Pass;State;Connects;Altitude (m)\n"
                    "Tioga;California;Yosemite Valley and Mono Lake;3031\n"
                    "Sonora;California;;2933\n", encoding="utf-8")
    rows = chunks(path, plain)
    assert [(r["sheet"], r["row"]) for r in rows] == [("passes", 2), ("passes", 3)]
    assert rows[0]["text"] == "Pass: Tioga; State: California; Connects: Yosemite Valley and Mono Lake; Altitude (m): 3031"
    assert rows[0]["heading_path"] == ["passes.csv", "passes"] and not rows[0]["omitted"]
    assert rows[1]["omit_reason"] == "min_words: 7 words, fewer than excel.min_words=8"
