"""jobs.excel.reader: workbooks and CSV files read as row streams, one per visible sheet."""

import json
import logging

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
    rows = _csv(tmp_path / "passes.csv", "Pass;State;Connects;Altitude (m)\n"
                                         "Tioga;California;Yosemite Valley and Mono Lake;3031\n"
                                         "Sonora;California;;2933\n", plain)
    assert [(r["sheet"], r["row"]) for r in rows] == [("passes", 2), ("passes", 3)]
    assert rows[0]["text"] == "Pass: Tioga; State: California; Connects: Yosemite Valley and Mono Lake; Altitude (m): 3031"
    assert rows[0]["heading_path"] == ["passes.csv", "passes"] and not rows[0]["omitted"]
    assert rows[1]["omit_reason"] == ("min_words: 7 words, fewer than excel.min_words=8; not shown to be a record of "
                                      "its table: 1 other row(s) of the table near it to compare it with, fewer than 2")


def _csv(path, text: str, plain) -> list[dict]:
    """The stage's rows for a CSV file of `text`."""
    path.write_text(text, encoding="utf-8")
    return chunks(path, plain)


def test_a_one_column_csv_keeps_the_commas_of_its_values(tmp_path, plain):
    rows = _csv(tmp_path / "reminders.csv", (
        "Reminder\n"
        "Renew the parking permit, the library card, and the passport before June\n"
        '"Call the plumber about the leak, then tell the landlord, the neighbours and the insurer"\n'
        "Book the venue, order the cake; send the invitations by Friday at the latest\n"), plain)
    assert [r["text"] for r in rows] == [
        "Reminder: Renew the parking permit, the library card, and the passport before June",
        "Reminder: Call the plumber about the leak, then tell the landlord, the neighbours and the insurer",
        "Reminder: Book the venue, order the cake; send the invitations by Friday at the latest"]


def test_the_header_line_chooses_among_the_delimiters_it_holds(tmp_path, plain):
    rows = _csv(tmp_path / "passes.csv", '"Pass, or route";Notes\n'
                                         "Tioga;Closed in winter, usually from November to late May or June\n"
                                         "Sonora;Steep, narrow and winding, with grades up to 26 percent\n", plain)
    assert [r["text"] for r in rows] == [
        "Pass, or route: Tioga; Notes: Closed in winter, usually from November to late May or June",
        "Pass, or route: Sonora; Notes: Steep, narrow and winding, with grades up to 26 percent"]


def test_formulas_without_a_cached_value_are_counted_and_named_per_sheet(tmp_path, plain, caplog):
    # openpyxl (and pandas through it) writes a formula without its value: only Excel or LibreOffice
    # computes it, and a reader that takes cached values sees an empty cell.
    path = book(tmp_path / "budget.xlsx", {
        "Costs": [["Item", "Monthly cost", "Yearly cost"],
                  ["Rent for the flat in the old town near the river", 1200, "=B2*12"],
                  ["Electricity, gas and heating for the whole flat", 95, "=B3*12"]],
        "Plain": [["Item", "Note"], ["Bicycle", "kept in the cellar under the stairs of the old house"]]})
    with caplog.at_level(logging.WARNING, logger="jobs.excel"):
        rows = chunks(path, plain)
    assert "Yearly cost" not in rows[0]["text"]  # nothing to show: the value was never computed
    assert json.loads(rows[0]["doc_stats"])["excel_formulas_without_value"] == 2
    (message,) = [r.getMessage() for r in caplog.records if "formula" in r.getMessage()]
    assert message.startswith("budget.xlsx: sheet 'Costs': 2 formula cell(s) have no computed value")
    assert "open and save the workbook in Excel or LibreOffice to compute them" in message


def test_formulas_saved_with_their_values_are_read_without_a_warning(plain, caplog):
    with caplog.at_level(logging.WARNING, logger="jobs.excel"):
        rows = chunks(READXL / "deaths.xlsx", plain)  # shared formulas, each with its cached value
    assert "excel_formulas_without_value" not in json.loads(rows[0]["doc_stats"])
    assert not [r for r in caplog.records if "formula" in r.getMessage()]
    assert rows[0]["text"].startswith("Name: David Bowie; Profession: musician; Age: 69;")  # a formula's value


def test_the_sheet_scan_counts_each_cell_once_whatever_the_block_size(tmp_path, monkeypatch):
    import zipfile

    from jobs.excel import reader

    wb = openpyxl.Workbook()
    ws = wb.active
    for r in range(1, 301):
        ws.append([f"item {r}", r, f"=B{r}*2" if r % 3 else r * 2])  # 200 formulas, none computed
    for r in range(1, 301, 10):
        ws.merge_cells(f"D{r}:E{r}")
    wb.save(tmp_path / "w.xlsx")
    with zipfile.ZipFile(tmp_path / "w.xlsx") as archive:
        part = "xl/worksheets/sheet1.xml"
        # One formula with a cached value, one computed to empty text: the value decides, not the formula.
        xml = archive.read(part).replace(b"<f>B1*2</f><v />", b"<f>B1*2</f><v>2</v>")
        xml = xml.replace(b'<c r="C2"><f>B2*2</f><v />', b'<c r="C2" t="str"><f>B2*2</f><v></v>')
        assert xml.count(b"<v>2</v>") >= 1 and b"<f>B4*2</f><v />" in xml
        whole = reader.scan_sheet(archive, part)
    (tmp_path / "x").mkdir()
    with zipfile.ZipFile(tmp_path / "x" / "w.xlsx", "w") as out:
        out.writestr(part, xml)
    with zipfile.ZipFile(tmp_path / "x" / "w.xlsx") as archive:
        edited = reader.scan_sheet(archive, part)
        for block, carry in ((97, 60), (1000, 64), (4096, 512)):
            monkeypatch.setattr(reader, "_SCAN_BLOCK", block)
            monkeypatch.setattr(reader, "_SCAN_CARRY", carry)
            assert reader.scan_sheet(archive, part) == edited
    assert whole.formulas_without_value == 200 and edited.formulas_without_value == 198
    assert len(whole.merges) == len(edited.merges) == 30 and whole.merges[0] == (4, 1, 5, 1)


def test_a_title_line_over_a_csv_table_does_not_make_it_one_column(tmp_path, plain):
    texts = [r["text"] for r in _csv(tmp_path / "passes.csv", "Mountain passes of the Sierra Nevada\n"
                                                              "Pass,Highway,Elevation in feet\n"
                                                              "Tioga Pass,State Route 120,9943\n"
                                                              "Sonora Pass,State Route 108,9624\n", plain)]
    assert any("Pass: Tioga Pass" in t and "Elevation in feet: 9943" in t for t in texts), texts
