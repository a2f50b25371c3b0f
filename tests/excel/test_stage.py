import csv
import datetime as dt
import json
import zipfile
from pathlib import Path

import openpyxl
import pyarrow.parquet as pq
import pytest

from jobs.config import ExcelConfig, QualityConfig
from jobs.excel.stage import (
    detect_header,
    excel_to_chunks,
    format_value,
    preview,
    read_workbook,
    require_defusedxml,
    write_discard_report,
)
from tests.conftest import CORPUS, REPO

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
BOOK = CORPUS / "workbooks" / "stanley-cups.xlsx"
XLSX = REPO / "tests" / "data" / "xlsx"
READXL, UNSTRUCTURED = XLSX / "readxl", XLSX / "unstructured"
TEMPLATES = REPO / "configs" / "templates"


def _work(path, source_path=None):
    return {"doc_id": "d1", "collection": "t", "source_path": source_path or path.name, "abs_path": str(path),
            "source_type": "excel", "content_sha256": "s", "pipeline_fingerprint": "fp", "run_id": "r"}


@pytest.fixture()
def plain(tmp_path):
    """Excel settings with no templates, so every row takes the `Header: value` fallback."""
    return ExcelConfig(templates_dir=tmp_path / "no-templates")


def _chunks(path, excel, **quality):
    rows = excel_to_chunks([_work(path)], excel=excel, quality=QualityConfig(**quality), embedding_model=MODEL)
    errors = [r for r in rows if r.get("error_stage")]
    assert not errors, errors
    return rows


def _sheet(rows, sheet):
    return [r for r in rows if r.get("sheet") == sheet]


def _book(path, rows_by_sheet: dict, formats: dict | None = None):
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


def test_number_formats_follow_their_sections():
    accounting = '_(* #,##0_);_(* \\(#,##0\\);_(* "—"_);_(@_)'  # the half-year report's format
    assert [format_value(v, accounting) for v in (12553, -81, 0)] == ["12,553", "(81)", "—"]
    assert format_value(1234.5, '"$"#,##0.00') == "$1,234.50"
    assert format_value(-1234.5, "$#,##0.00") == "-$1,234.50"
    assert format_value(1234.5, "[$€-407] #,##0.00") == "€ 1,234.50"
    assert format_value(1.5, "0.##") == "1.5" and format_value(12345.678, "0.00E+00") == "1.23E+04"
    assert format_value(dt.datetime(1947, 1, 8), "d mmmm yyyy") == "8 January 1947"
    assert format_value(dt.datetime(2016, 1, 10), "mm-dd-yy") == "2016-01-10"  # numeric dates: ISO, not locale
    assert format_value("a<br/>b_x000D_c") == "a b c" and format_value("#N/A") == ""


def test_real_workbook_rows_carry_their_headers():
    rows = list(read_workbook(str(BOOK), ExcelConfig()))
    sheets = {r[0] for r in rows}
    assert sheets == {"Stanley Cups", "Stanley Cups Since 67"}
    no_templates = ExcelConfig(templates_dir=Path("/nonexistent"))
    chunks = excel_to_chunks([_work(BOOK, "stanley-cups.xlsx")], excel=no_templates, quality=QualityConfig(),
                             embedding_model=MODEL)
    texts = [c["text"] for c in chunks]
    assert "Team: Maple Leafs; Location: TOR; Stanley Cups: 13" in texts
    # configs/templates/stanley-cups.yaml turns the same rows into sentences (and lifts them out of the
    # fragment band: 7 words as `Header: value` pairs).
    templated = excel_to_chunks([_work(BOOK, "stanley-cups.xlsx")], excel=ExcelConfig(templates_dir=TEMPLATES),
                                quality=QualityConfig(), embedding_model=MODEL)
    assert "The Blues hockey team (STL) has won 1 Stanley Cups." in [c["text"] for c in templated]
    assert not any(c["omitted"] for c in templated)
    first = chunks[0]
    # The title row "Stanley Cups" repeats the sheet name, so it is not added to the heading path.
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


# --- header detection on real workbooks ---------------------------------------------------------

def test_junk_rows_above_the_table_are_skipped(plain):
    rows = _chunks(READXL / "deaths.xlsx", plain)
    arts = _sheet(rows, "arts")
    assert arts[0]["row"] == 6
    assert arts[0]["text"] == ("Name: David Bowie; Profession: musician; Age: 69; Has kids: yes; "
                               "Date of birth: 1947-01-08; Date of death: 2016-01-10")
    # rows 1-4 ("Lots of people / simply cannot resist writing …", a merged B4:E4) never become chunks or headers
    assert not any("resist writing" in r["text"] or "merging" in r["text"] for r in rows)
    assert json.loads(rows[0]["doc_stats"])["excel_rows_above_headers"] == 8


def test_two_line_header_joins_parent_and_child(plain):
    rows = _sheet(_chunks(READXL / "clippy.xlsx", plain), "two-row-header")
    assert [r["text"] for r in rows] == [
        "name › (at birth): Clippy; species › (office supply type): paperclip; "
        "death › (date is approximate): 2007-01-01; weight › (in grams): 0.9"]


def test_merged_header_cells_are_filled_across(tmp_path, plain):
    path = tmp_path / "merged.xlsx"
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "Sales"
    for r in (["Regional sales"], [], ["Region", "Sales", None, "Comment"], [None, 2022, 2023, None],
              ["North", 1200, 1350, "steady growth in the northern stores"],
              ["South", 900, 800, "two stores closed during the year"]):
        ws.append(r)
    for ref in ("B3:C3", "A3:A4", "D3:D4"):
        ws.merge_cells(ref)
    ws["B5"].number_format = ws["C5"].number_format = "#,##0"
    wb.save(path)
    rows = _chunks(path, plain)
    assert rows[0]["text"] == ("Region: North; Sales › 2022: 1,200; Sales › 2023: 1,350; "
                               "Comment: steady growth in the northern stores")
    assert rows[0]["heading_path"] == ["merged.xlsx", "Sales", "Regional sales"]


def test_merged_group_headers_and_several_tables_on_one_sheet(plain):
    rows = _chunks(UNSTRUCTURED / "2023-half-year-analyses-by-segment.xlsx", plain)
    other = _sheet(rows, "OS-Other information 30 06 2023")
    assert other[0]["row"] == 9 and other[0]["heading_path"][-1] == "Other information"
    # Row 6 groups the columns by half-year, row 7 names them; a blank row 8 separates header and data.
    assert "January–June 2023 › Impairment of intangible assets (d): (9)" in other[0]["text"]
    assert "January–June 2022 › Impairment of intangible assets (d): (285)" in other[0]["text"]
    segments = _sheet(rows, "OS-Rev.and results 30 06 2023")
    titles = {r["heading_path"][-1] for r in segments if len(r["heading_path"]) == 3}
    assert titles == {"3.1 Operating segments: Revenue and results"}
    nestle_na = [r for r in segments if r["text"].startswith("In millions of CHF: Zone NA;")]
    assert [r["row"] for r in nestle_na] == [9, 24]  # one row in each of the two tables
    assert "January–June 2022 › Depreciation and amortization: (348)" in nestle_na[1]["text"]
    assert json.loads(rows[0]["doc_stats"])["excel_tables"] == 7


def test_tables_separated_by_blank_rows_keep_their_titles(plain):
    rows = _chunks(UNSTRUCTURED / "vodafone.xlsx", plain)
    by_title = {}
    for r in rows:
        by_title.setdefault(r["heading_path"][-1], []).append(r["row"])
    assert by_title == {"Financial performance": [5, 6, 7, 8, 9],
                        "Operational metrics": list(range(13, 21)), "Other": [24, 25]}
    mobile = next(r for r in rows if r["row"] == 13)
    assert mobile["text"] == "Topic: Mobile customers; Period: Nine quarters to 30 June 2023; Page: 6"
    assert mobile["breadcrumb"] == "vodafone.xlsx › Index › Operational metrics"


def test_blank_rows_inside_a_table_do_not_split_it(plain):
    rows = _chunks(READXL / "skipping.xlsx", plain)
    for sheet in ("two_blank_rows", "occupied_row_and_blank_row", "two_occupied_rows"):
        texts = [r["text"] for r in _sheet(rows, sheet)]
        assert texts == ["var1: v2,1; var2: v2,2", "var1: v4,1; var2: v4,2"]
    assert _sheet(rows, "two_occupied_rows")[0]["heading_path"][-1] == "blah blah: yada yada"


def test_cyrillic_headers_and_values(plain):
    rows = _chunks(READXL / "Ekaterinburg_IP_9.xlsx", plain)
    first = rows[0]
    assert first["row"] == 5 and first["sheet"] == "СПАРК - Список"
    assert first["text"].startswith("ФИО: Аббасов Илал Газанфар Оглы; Дата регистрации: 27.05.2004; Отрасль: ")
    assert not first["omitted"]


def test_emoji_survive(plain):
    (row,) = _chunks(UNSTRUCTURED / "emoji.xlsx", plain)
    assert row["text"] == "Column A: 🤠😅" and row["omit_reason"].startswith("min_fields:")


def test_chart_and_hidden_sheets_are_skipped_and_counted(tmp_path, plain):
    rows = _chunks(READXL / "embedded-chartsheet.xlsx", plain)
    assert {r["sheet"] for r in rows} == {"iris", "mtcars", "chickwts", "quakes"}
    assert json.loads(rows[0]["doc_stats"])["excel_chart_sheets_skipped"] == 1

    path = _book(tmp_path / "hidden.xlsx", {
        "Visible": [["Name", "Role"], ["Ada Lovelace", "wrote the first published program"]],
        "Secret": [["Name", "Role"], ["Mallory", "should never be indexed"]]})
    wb = openpyxl.load_workbook(path)
    wb["Secret"].sheet_state = "hidden"
    wb.save(path)
    rows = _chunks(path, plain)
    assert [r["sheet"] for r in rows] == ["Visible"]
    assert json.loads(rows[0]["doc_stats"])["excel_hidden_sheets_skipped"] == 1


def test_header_row_can_be_pinned(plain):
    excel = plain.model_copy(update={"header_rows": [{"file": "skipping.xlsx", "sheet": "two_blank_rows",
                                                      "header_row": 5}]})
    rows = _sheet(_chunks(READXL / "skipping.xlsx", excel), "two_blank_rows")
    assert [r["text"] for r in rows] == ["v2,1: v4,1; v2,2: v4,2"]
    excel = plain.model_copy(update={"header_rows": [{"file": "*.xlsx", "sheet": "two_blank_rows", "header_row": 0}]})
    rows = _sheet(_chunks(READXL / "skipping.xlsx", excel), "two_blank_rows")
    assert [r["text"] for r in rows] == ["Column A: var1; Column B: var2", "Column A: v2,1; Column B: v2,2",
                                         "Column A: v4,1; Column B: v4,2"]


# --- every row names its columns ----------------------------------------------------------------

def test_mtcars_rows_name_every_column_next_to_its_value(plain):
    rows = _sheet(_chunks(READXL / "datasets.xlsx", plain), "mtcars")
    assert len(rows) == 32
    columns = ["mpg", "cyl", "disp", "hp", "drat", "wt", "qsec", "vs", "am", "gear", "carb"]
    for r in rows:
        parts = r["text"].split("; ")
        assert [p.split(": ")[0] for p in parts] == columns, r["text"]
        assert all(p.split(": ")[1] for p in parts)
    assert rows[0]["text"] == ("mpg: 21; cyl: 6; disp: 160; hp: 110; drat: 3.9; wt: 2.62; qsec: 16.46; vs: 0; am: 1; "
                               "gear: 4; carb: 4")
    # numbers under a header row are described by it: kept (a template makes them a sentence)
    assert not any(r["omitted"] for r in rows)
    assert all("template:fallback" in r["tags"] for r in rows)


def test_shipped_mtcars_template_turns_rows_into_sentences():
    rows = _sheet(_chunks(READXL / "datasets.xlsx", ExcelConfig(templates_dir=TEMPLATES)), "mtcars")
    assert rows[0]["text"] == (
        "A car that does 21 miles per US gallon has 6 cylinders, a displacement of 160 cubic inches and 110 gross "
        "horsepower, a V-shaped engine and manual transmission; it weighs 2.62 thousand pounds, covers a quarter "
        "mile in 16.46 seconds, has 4 forward gears and 4 carburetors, with a rear axle ratio of 3.9.")
    assert all(not r["omitted"] and "template:mtcars" in r["tags"] for r in rows)


# --- refused inputs -----------------------------------------------------------------------------

def test_legacy_xls_is_refused_with_a_conversion_hint(plain):
    rows = excel_to_chunks([_work(UNSTRUCTURED / "tests-example.xls"), _work(BOOK)], excel=plain,
                           quality=QualityConfig(), embedding_model=MODEL)
    (err,) = [r for r in rows if r.get("error_stage")]
    assert err["error_class"] == "ValueError" and "legacy .xls" in err["error_message"]
    assert "libreoffice --headless --convert-to xlsx FILE" in err["error_message"]
    assert "re-save it as .xlsx in Excel" in err["error_message"]


def test_workbook_openpyxl_cannot_parse_becomes_one_error_row(plain):
    rows = excel_to_chunks([_work(READXL / "los-angeles-arrests-xlsx.xlsx"), _work(BOOK)], excel=plain,
                           quality=QualityConfig(), embedding_model=MODEL)
    (err,) = [r for r in rows if r.get("error_stage")]
    assert err["source_path"] == "los-angeles-arrests-xlsx.xlsx" and err["error_class"] == "ValueError"
    assert err["error_message"].startswith("openpyxl could not read the workbook: IndexError")
    assert "re-save it in Excel" in err["error_message"]
    assert any(r["source_path"] == "stanley-cups.xlsx" and r["row_kind"] == "chunk" for r in rows)


def _rezip(src, dst, replace: dict[str, bytes] = None, add: dict[str, bytes] = None):
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, (replace or {}).get(info.filename, zin.read(info.filename)))
        for name, data in (add or {}).items():
            zout.writestr(name, data)
    return dst


def _refused(tmp_path, bad, excel, match):
    rows = excel_to_chunks([_work(bad), _work(BOOK)], excel=excel, quality=QualityConfig(), embedding_model=MODEL)
    (err,) = [r for r in rows if r.get("error_stage")]
    assert err["source_path"] == bad.name and err["error_class"] == "ValueError"
    assert match in err["error_message"], err["error_message"]
    assert sum(r["row_kind"] == "chunk" for r in rows) == 6  # stanley-cups.xlsx, in the same call, still lands
    return err["error_message"]


def test_zip_bomb_is_refused_before_opening(tmp_path, plain):
    # 64 MiB of one byte deflates to ~64 KiB: a ratio of ~1000 where real sheets stay under 60.
    bomb = _rezip(BOOK, tmp_path / "bomb.xlsx", add={"xl/media/padding.bin": b"\0" * (64 * 1024 * 1024)})
    message = _refused(tmp_path, bomb, plain, "excel.max_compression_ratio=200")
    assert "xl/media/padding.bin expands" in message
    _refused(tmp_path, bomb, plain.model_copy(update={"max_uncompressed_bytes": 10 * 1024 * 1024}),
             "over excel.max_uncompressed_bytes=10,485,760")
    crowded = _rezip(BOOK, tmp_path / "crowded.xlsx", add={f"xl/media/image{i}.png": b"x" for i in range(20)})
    _refused(tmp_path, crowded, plain.model_copy(update={"max_zip_entries": 20}),
             "33 entries, over excel.max_zip_entries=20")


def test_billion_laughs_workbook_is_refused(tmp_path, plain):
    laughs = ('<?xml version="1.0"?>\n<!DOCTYPE lolz [<!ENTITY lol "lol">'
              + "".join(f'<!ENTITY lol{i} "{("&lol" + str(i - 1) + ";") * 10 if i > 1 else "&lol;" * 10}">'
                        for i in range(1, 10))
              + ']>\n<sst xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main" count="1" uniqueCount="1">'
              '<si><t>&lol9;</t></si></sst>')
    bad = _rezip(BOOK, tmp_path / "laughs.xlsx", replace={"xl/sharedStrings.xml": laughs.encode()})
    message = _refused(tmp_path, bad, plain, "xl/sharedStrings.xml declares a DTD")
    assert "billion laughs" in message


def _written(tmp_path) -> Path:
    """A workbook openpyxl writes, with the parts every package has (docProps, _rels, styles, a sheet)."""
    return _book(tmp_path / "written.xlsx", {"Passes": [["Name", "Team", "Passes"], ["Ada Lovelace", "Reds", 12],
                                                       ["Alan Turing", "Blues", 9]]})


_DOCTYPE = b'<!DOCTYPE x [<!ENTITY a "b">]>'


def _with_doctype(xml: bytes) -> bytes:
    """The part with a DTD right after its XML declaration, where a parser would read it."""
    head, sep, rest = xml.partition(b"?>")
    return head + sep + _DOCTYPE + rest if sep else _DOCTYPE + xml


@pytest.mark.parametrize("part", ["docProps/core.xml", "docProps/app.xml", "_rels/.rels", "xl/_rels/workbook.xml.rels",
                                  "[Content_Types].xml", "xl/styles.xml"])
def test_a_dtd_in_any_xml_part_is_refused_naming_the_part(tmp_path, plain, part):
    src = _written(tmp_path)
    with zipfile.ZipFile(src) as z:
        assert part in z.namelist()
        original = z.read(part)
    bad = _rezip(src, tmp_path / "doctype.xlsx", replace={part: _with_doctype(original)})
    message = _refused(tmp_path, bad, plain, f"zip entry {part} declares a DTD")
    assert "billion laughs" in message
    _chunks(src, plain)  # the same workbook without the DTD reads


def test_a_dtd_is_found_anywhere_in_a_part_in_utf16_and_under_any_name(tmp_path, plain):
    import random

    from jobs.excel.stage import _DTD_BLOCK, _SNIFF_BYTES

    src = _written(tmp_path)
    rng = random.Random(3)
    # Past the first MiB, split across two of the scan's reads; random text keeps the compression
    # ratio of a real part, so the zip-bomb guard is not what refuses it.
    boundary = _SNIFF_BYTES + _DTD_BLOCK
    prefix = '<?xml version="1.0"?><root><a>'
    filler = "".join(rng.choice("abcdefghij klmnop") for _ in range(boundary - 4 - len(prefix) - len("</a>")))
    late = f"{prefix}{filler}</a>".encode()
    assert len(late) < boundary < len(late) + len(_DOCTYPE)
    bad = _rezip(src, tmp_path / "late.xlsx", add={"customXml/item1.xml": late + _DOCTYPE + b"</root>"})
    _refused(tmp_path, bad, plain, "zip entry customXml/item1.xml declares a DTD")

    utf16 = ('\ufeff<?xml version="1.0" encoding="UTF-16"?><!doctype x [<!entity a "b">]><x/>').encode("utf-16-le")
    bad = _rezip(src, tmp_path / "utf16.xlsx", replace={"docProps/app.xml": utf16})
    _refused(tmp_path, bad, plain, "zip entry docProps/app.xml declares a DTD")

    # openpyxl follows relationships, not names: XML in a part called .bin is scanned as XML.
    bad = _rezip(src, tmp_path / "renamed.xlsx", add={"xl/media/sheet.bin": b'  <?xml version="1.0"?>' + _DOCTYPE + b"<x/>"})
    _refused(tmp_path, bad, plain, "zip entry xl/media/sheet.bin declares a DTD")
    png = b"\x89PNG\r\n\x1a\n" + b"<!DOCTYPE" * 3  # binary that happens to hold the bytes: not XML, not scanned
    _chunks(_rezip(src, tmp_path / "image.xlsx", add={"xl/media/image1.png": png}), plain)


def test_an_encoding_that_would_hide_a_dtd_from_the_scan_is_refused(tmp_path, plain):
    src = _written(tmp_path)
    for encoding in ("cp037", "UTF-7"):
        part = f'<?xml version="1.0" encoding="{encoding}"?>'.encode() + "<x/>".encode("cp037")
        bad = _rezip(src, tmp_path / f"{encoding}.xlsx", replace={"docProps/core.xml": part})
        _refused(tmp_path, bad, plain, f"zip entry docProps/core.xml declares encoding '{encoding}'")
    latin = b'<?xml version="1.0" encoding="ISO-8859-1"?><x>caf\xe9</x>'  # an ASCII superset reads
    _chunks(_rezip(src, tmp_path / "latin.xlsx", add={"customXml/item1.xml": latin}), plain)


def test_openpyxl_without_defusedxml_is_refused_with_the_reason(tmp_path, plain, monkeypatch):
    import openpyxl.xml

    monkeypatch.setattr(openpyxl.xml, "DEFUSEDXML", False)
    with pytest.raises(RuntimeError, match=r"openpyxl is not using defusedxml \(openpyxl.xml.DEFUSEDXML is False"):
        require_defusedxml()
    rows = excel_to_chunks([_work(BOOK)], excel=plain, quality=QualityConfig(), embedding_model=MODEL)
    (err,) = rows
    assert err["error_stage"] and "openpyxl is not using defusedxml" in err["error_message"]


def test_openpyxl_told_by_the_environment_not_to_use_defusedxml_is_refused():
    """The real switch, in a fresh process: openpyxl reads OPENPYXL_DEFUSEDXML once, when imported."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, OPENPYXL_DEFUSEDXML="False")
    proc = subprocess.run([sys.executable, "-c", "from jobs.excel.stage import require_defusedxml; require_defusedxml()"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "OPENPYXL_DEFUSEDXML='False' in this process's environment" in proc.stderr


# --- CSV ----------------------------------------------------------------------------------------

def test_csv_takes_the_same_row_pipeline(tmp_path, plain):
    path = tmp_path / "passes.csv"
    path.write_text("Pass;State;Connects;Altitude (m)\n"
                    "Tioga;California;Yosemite Valley and Mono Lake;3031\n"
                    "Sonora;California;;2933\n", encoding="utf-8")
    rows = _chunks(path, plain)
    assert [(r["sheet"], r["row"]) for r in rows] == [("passes", 2), ("passes", 3)]
    assert rows[0]["text"] == "Pass: Tioga; State: California; Connects: Yosemite Valley and Mono Lake; Altitude (m): 3031"
    assert rows[0]["heading_path"] == ["passes.csv", "passes"] and not rows[0]["omitted"]
    assert rows[1]["omit_reason"] == "min_words: 7 words, fewer than excel.min_words=8"


# --- row filters --------------------------------------------------------------------------------

FILTER_ROWS = [
    ["Item", "Description", "Amount", "Notes"],
    ["Nut", "A hexagonal nut for the M8 bolts that hold the frame", 5, None],   # 2: kept
    ["Widget", None, None, None],                                               # 3: min_fields
    ["Total", None, 1234, None],                                                # 4: structural label
    ["-----", "-----", "-----", None],                                          # 5: separators
    [None, None, 12, 3.5],                                                      # 6: min_words (headers describe it)
    ["Bolt", "steel", 3, None],                                                 # 7: min_words (6 words)
    ["Gear", " ".join(["tooth"] * 250), 9, None],                               # 8: max_words
    ["Chapter 1", "Section 2", None, None],                                     # 9: structural labels only
]


def test_each_filter_rule_records_its_reason(tmp_path, plain):
    rows = _chunks(_book(tmp_path / "filters.xlsx", {"Parts": FILTER_ROWS}), plain)
    by_row = {r["row"]: r for r in rows}
    assert not by_row[2]["omitted"] and by_row[2]["omit_reason"] is None
    expect = {
        3: ("fragment", "min_fields: 1 non-empty cell(s), fewer than excel.min_fields=2"),
        4: ("context_dead", "structural: its only text is 'Total', matching excel.structural_patterns"),
        5: ("context_dead", "structural: only separators ('-----', '-----', '-----'), matching excel.structural_patterns"),
        7: ("fragment", "min_words: 6 words, fewer than excel.min_words=8"),
        8: ("too_long", "max_words: 255 words, more than excel.max_words=200"),
        9: ("context_dead", "structural: its only text is 'Chapter 1', 'Section 2', matching excel.structural_patterns"),
    }
    for n, (quality, reason) in expect.items():
        assert (by_row[n]["omitted"], by_row[n]["quality"], by_row[n]["omit_reason"]) == (True, quality, reason)
    assert by_row[6]["omitted"] and by_row[6]["omit_reason"].startswith("min_words:")


def test_numbers_without_any_header_are_context_dead(tmp_path, plain):
    rows = _chunks(_book(tmp_path / "bare.xlsx", {"Data": [[1, 2.5, 3], [4, 5.5, 6], [7, 8.5, 9]]}), plain)
    assert rows and all(r["omitted"] and r["omit_reason"].startswith("numeric: 3 of 3 cells") for r in rows)


def test_filter_rules_are_configurable(tmp_path, plain):
    loose = plain.model_copy(update={"min_fields": 1, "min_words": 0, "max_words": 1000, "numeric_ratio": None,
                                     "structural_patterns": []})
    rows = _chunks(_book(tmp_path / "filters.xlsx", {"Parts": FILTER_ROWS}), loose, excel_fragment_words=0)
    omitted = {r["row"]: r["omit_reason"] for r in rows if r["omitted"]}
    assert omitted == {}


# --- QA outputs ---------------------------------------------------------------------------------

def test_discard_report_lists_omitted_rows_with_rule_and_reason(tmp_path, plain):
    from jobs.store.parquet import RunOutput

    chunks = _chunks(_book(tmp_path / "filters.xlsx", {"Parts": FILTER_ROWS}), plain)
    run_dir = tmp_path / "run"
    RunOutput(run_dir, 384).write_part(chunks)
    (run_dir / "chunks" / "part-00001.parquet.tmp").write_bytes(b"torn")  # a killed writer's leftover is ignored
    paths = write_discard_report(run_dir)
    assert paths == {"excel_discarded.parquet": run_dir / "qa" / "excel_discarded.parquet",
                     "excel_discarded.csv": run_dir / "qa" / "excel_discarded.csv"}
    table = pq.read_table(paths["excel_discarded.parquet"]).to_pylist()
    assert [(r["row"], r["rule"]) for r in table] == [(3, "min_fields"), (4, "structural"), (5, "structural"),
                                                      (6, "min_words"), (7, "min_words"), (8, "max_words"),
                                                      (9, "structural")]
    first = table[0]
    assert first == {"file": "filters.xlsx", "sheet": "Parts", "row": 3, "rule": "min_fields",
                     "reason": "1 non-empty cell(s), fewer than excel.min_fields=2", "text": "Item: Widget"}
    with open(paths["excel_discarded.csv"], newline="", encoding="utf-8") as fh:
        assert list(csv.DictReader(fh)) == [{k: str(v) for k, v in r.items()} for r in table]


def test_discard_report_of_a_run_without_excel_rows(tmp_path):
    paths = write_discard_report(tmp_path)
    assert pq.read_table(paths["excel_discarded.parquet"]).num_rows == 0
    assert paths["excel_discarded.csv"].read_text().strip() == "file,sheet,row,rule,reason,text"


def test_preview_shows_header_template_rows_and_discards(tmp_path):
    out = preview(READXL / "datasets.xlsx", n=2, excel=ExcelConfig(templates_dir=TEMPLATES), quality=QualityConfig())
    assert "datasets.xlsx: 3 sheet(s) read, 0 hidden and 0 chart sheet(s) skipped; 4 template(s)" in out
    assert "== sheet 'mtcars' ==\ntable 1: header row 1; title: —\n" in out
    assert "  header: mpg | cyl | disp | hp | drat | wt | qsec | vs | am | gear | carb\n" in out
    assert "  template: mtcars (datasets.yaml)\n  rows: 32 rendered, 0 discarded\n  first 2 rendered:\n" in out
    assert "    row 3: A car that does 21 miles per US gallon" in out and "row 4:" not in out

    out = preview(READXL / "datasets.xlsx", sheet="chickwts", n=1, excel=ExcelConfig(templates_dir=tmp_path),
                  quality=QualityConfig())
    assert "mtcars" not in out and "template: fallback" in out
    assert "rows: 0 rendered, 71 discarded" in out
    assert "    row 2: min_words: 4 words, fewer than excel.min_words=8\n      weight: 179; feed: horsebean" in out
    with pytest.raises(ValueError, match="no visible sheet named 'nope'; sheets: mtcars, chickwts, quakes"):
        preview(READXL / "datasets.xlsx", sheet="nope", excel=ExcelConfig(), quality=QualityConfig())


def test_preview_says_why_a_template_did_not_match(tmp_path):
    (tmp_path / "cars.yaml").write_text("name: cars\nfile: '*.xlsx'\nsheet: mtcars\ntext: '{model} does {mpg} mpg.'\n")
    out = preview(READXL / "datasets.xlsx", sheet="mtcars", n=1, excel=ExcelConfig(templates_dir=tmp_path),
                  quality=QualityConfig())
    assert "template: fallback" in out and "cars covers this sheet but the header lacks: model" in out


def test_a_worker_renders_with_the_template_texts_it_was_shipped_not_its_own_directory(tmp_path):
    import shutil

    from jobs.excel.stage import excel_to_chunks
    from jobs.excel.templates import read_template_texts

    shipped = read_template_texts(REPO / "configs" / "templates")
    work = {"doc_id": "d", "collection": "c", "source_path": "stanley-cups.xlsx", "source_type": "excel",
            "content_sha256": "s", "pipeline_fingerprint": "fp", "run_id": "r",
            "abs_path": str(shutil.copy(REPO / "tests/data/corpus/workbooks/stanley-cups.xlsx", tmp_path))}
    # A node where the driver's templates directory does not exist (another machine of the cluster).
    elsewhere = ExcelConfig(templates_dir=tmp_path / "not-on-this-node")
    rows = excel_to_chunks([work], excel=elsewhere, quality=QualityConfig(),
                           embedding_model="sentence-transformers/all-MiniLM-L6-v2", templates=shipped)
    assert rows and all("template:stanley-cups" in r["tags"] for r in rows if r["row_kind"] == "chunk"), rows[:1]
