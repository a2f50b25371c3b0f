"""jobs.excel.tables: headers found, not assumed; several tables on a sheet; pinned headers."""

import json
from collections import Counter

import openpyxl

from jobs.config import ExcelConfig
from jobs.excel.reader import open_sheets
from jobs.excel.tables import pinned_header, split_tables
from tests.excel.conftest import READXL, STATS, UNSTRUCTURED, book, chunks, on_sheet


def _tables(path, cfg: ExcelConfig) -> list[tuple]:
    """(sheet, header row, headers, title, data row number) per data row, as the stage reads them."""
    counts: Counter = Counter()
    return [(name, t.header_row, t.headers, t.title, row.number)
            for name, rows in open_sheets(path, cfg, counts)
            for t, row in split_tables(rows, name, scan=cfg.header_scan_rows, counts=counts)]


def test_header_found_below_a_title_row(tmp_path):
    path = book(tmp_path / "cups.xlsx", {
        "Teams": [["Stanley Cups", None, None], ["Team", "Location", "Stanley Cups"], ["Blues", "STL", 1]]})
    assert _tables(path, ExcelConfig()) == [("Teams", 2, ["Team", "Location", "Stanley Cups"], "Stanley Cups", 3)]


def test_junk_rows_above_the_table_are_skipped(plain):
    rows = chunks(READXL / "deaths.xlsx", plain)
    arts = on_sheet(rows, "arts")
    assert arts[0]["row"] == 6
    assert arts[0]["text"] == ("Name: David Bowie; Profession: musician; Age: 69; Has kids: yes; "
                               "Date of birth: 1947-01-08; Date of death: 2016-01-10")
    # rows 1-4 ("Lots of people / simply cannot resist writing …", a merged B4:E4) never become chunks or headers
    assert not any("resist writing" in r["text"] or "merging" in r["text"] for r in rows)
    assert json.loads(rows[0]["doc_stats"])["excel_rows_above_headers"] == 8


def test_two_line_header_joins_parent_and_child(plain):
    rows = on_sheet(chunks(READXL / "clippy.xlsx", plain), "two-row-header")
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
    rows = chunks(path, plain)
    assert rows[0]["text"] == ("Region: North; Sales › 2022: 1,200; Sales › 2023: 1,350; "
                               "Comment: steady growth in the northern stores")
    assert rows[0]["heading_path"] == ["merged.xlsx", "Sales", "Regional sales"]


def test_merged_group_headers_and_several_tables_on_one_sheet(plain):
    rows = chunks(UNSTRUCTURED / "2023-half-year-analyses-by-segment.xlsx", plain)
    other = on_sheet(rows, "OS-Other information 30 06 2023")
    assert other[0]["row"] == 9 and other[0]["heading_path"][-1] == "3. Analyses by segment: Other information"
    # Row 6 groups the columns by half-year, row 7 names them; a blank row 8 separates header and data.
    assert "January–June 2023 › Impairment of intangible assets (d): (9)" in other[0]["text"]
    assert "January–June 2022 › Impairment of intangible assets (d): (285)" in other[0]["text"]
    segments = on_sheet(rows, "OS-Rev.and results 30 06 2023")
    titles = {r["heading_path"][-1] for r in segments if len(r["heading_path"]) == 3}
    assert titles == {"3. Analyses by segment: 3.1 Operating segments: Revenue and results"}
    nestle_na = [r for r in segments if r["text"].startswith("In millions of CHF: Zone NA;")]
    assert [r["row"] for r in nestle_na] == [9, 24]  # one row in each of the two tables
    assert "January–June 2022 › Depreciation and amortization: (348)" in nestle_na[1]["text"]
    assert json.loads(rows[0]["doc_stats"])["excel_tables"] == 7


def test_tables_separated_by_blank_rows_keep_their_titles(plain):
    rows = chunks(UNSTRUCTURED / "vodafone.xlsx", plain)
    by_title = {}
    for r in rows:
        by_title.setdefault(r["heading_path"][-1], []).append(r["row"])
    assert by_title == {"Financial performance": [5, 6, 7, 8, 9],
                        "Operational metrics": list(range(13, 21)), "Other": [24, 25]}
    mobile = next(r for r in rows if r["row"] == 13)
    assert mobile["text"] == "Topic: Mobile customers; Period: Nine quarters to 30 June 2023; Page: 6"
    assert mobile["breadcrumb"] == "vodafone.xlsx › Index › Operational metrics"


def test_blank_rows_inside_a_table_do_not_split_it(plain):
    rows = chunks(READXL / "skipping.xlsx", plain)
    for sheet in ("two_blank_rows", "occupied_row_and_blank_row", "two_occupied_rows"):
        texts = [r["text"] for r in on_sheet(rows, sheet)]
        assert texts == ["var1: v2,1; var2: v2,2", "var1: v4,1; var2: v4,2"]
    assert on_sheet(rows, "two_occupied_rows")[0]["heading_path"][-1] == "blah blah: yada yada"


def test_header_row_can_be_pinned(plain):
    excel = plain.model_copy(update={"header_rows": [{"file": "skipping.xlsx", "sheet": "two_blank_rows",
                                                      "header_row": 5}]})
    rows = on_sheet(chunks(READXL / "skipping.xlsx", excel), "two_blank_rows")
    assert [r["text"] for r in rows] == ["v2,1: v4,1; v2,2: v4,2"]
    excel = plain.model_copy(update={"header_rows": [{"file": "*.xlsx", "sheet": "two_blank_rows", "header_row": 0}]})
    rows = on_sheet(chunks(READXL / "skipping.xlsx", excel), "two_blank_rows")
    assert [r["text"] for r in rows] == ["Column A: var1; Column B: var2", "Column A: v2,1; Column B: v2,2",
                                         "Column A: v4,1; Column B: v4,2"]


def test_pins_match_the_file_name_or_its_path_in_the_project_glob_dialect():
    pin = [{"file": "readxl/*.xlsx", "sheet": "TWO_*", "header_row": 5}]
    assert pinned_header(pin, "skipping.xlsx", "readxl/skipping.xlsx", "two_blank_rows") == 5  # by path; any case
    assert pinned_header(pin, "skipping.xlsx", "skipping.xlsx", "two_blank_rows") is None
    assert pinned_header([{"file": "*.xlsx", "sheet": "*", "header_row": 0}], "a.xlsx", "deep/down/a.xlsx", "S") == 0
    # `*` stays within one directory; `**` spans them
    assert pinned_header([{"file": "data/*.xlsx", "sheet": "*", "header_row": 2}], "a.xlsx", "data/q1/a.xlsx", "S") is None
    assert pinned_header([{"file": "data/**/*.xlsx", "sheet": "*", "header_row": 2}], "a.xlsx", "data/q1/a.xlsx", "S") == 2


# Published statistics tables (slices of ../shared/data/xlsx/stats; tests/data/xlsx/stats/LICENSE.md).

def test_long_column_names_with_note_markers_are_a_header(plain):
    # HSE's RIDHIST: eight lines of notes, then 14 column names of up to 19 words with `[Note n]` markers.
    rows = chunks(STATS / "ridhist-table3.xlsx", plain)
    assert len(rows) == 7 and all(r["omit_reason"] is None for r in rows)
    assert rows[0]["text"].startswith("Employment Status: Employee; Year: 1974; Industry: All industries;")
    assert "Column " not in " ".join(r["text"] for r in rows) and "[Note" not in " ".join(r["text"] for r in rows)


def test_years_with_footnote_marks_head_columns_and_missing_marks_show_nothing(plain):
    # Toronto transit ridership: `2015 *` among the year columns, `N/A` where a fare did not exist yet.
    rows = {r["row"]: r for r in chunks(STATS / "toronto-transit.xlsx", plain)}
    assert rows[8]["text"].startswith("FARE MEDIA: TOKENS; 2017: 76,106; 2016: 102,073; 2015: 110,945;")
    assert rows[9]["text"] == "FARE MEDIA: TICKETS; 2010: 1,298; 2009: 8,807; 2008: 34,445"
    assert not any("N/A" in r["text"] for r in rows.values())


def test_grouped_units_under_merged_parents_and_an_unnamed_row_header_column(plain):
    # HM Treasury PESA 4.1: `Nominal £ billion | Real terms (1) £ billion | Per cent of GDP (2)` repeated
    # under merged group names; the corner over the fiscal years is blank, so the year goes out bare.
    rows = chunks(STATS / "pesa-4-1.xlsx", plain)
    assert rows[0]["text"].startswith("1981-82; Public sector current expenditure › Nominal £ billion: 110.6; "
                                      "Public sector current expenditure › Real terms £ billion: 378.7; "
                                      "Public sector current expenditure › Per cent of GDP: 37.1; Depreciation › ")
    assert len(rows) == 5 and not any("Column " in r["text"] for r in rows)


def test_three_header_lines_over_merged_groups_unit_signs_and_a_blank_corner(plain):
    # ABS 1800.0 Table 1: `Response clear` merged over `Yes | No | Total`, each merged over `no. | %`.
    rows = chunks(STATS / "ozmarriage-table1.xlsx", plain)
    assert len(rows) == 5 and all(r["omit_reason"] is None for r in rows)
    assert rows[0]["text"].startswith("New South Wales; Response clear › Yes › no.: 2,374,362; "
                                      "Response clear › Yes › %: 57.8; Response clear › No › no.: 1,736,838;")


def test_a_line_of_years_over_a_line_of_one_status_is_a_two_line_header(plain):
    # HM Treasury PESA 4.2: `1998-99 | 1999-00 | …` (years alone) over `outturn | outturn | …`.
    # Each row's 24 years run past the model's window, so each is cut in two (jobs.excel.split).
    rows = chunks(STATS / "pesa-4-2.xlsx", plain)
    assert [r["row"] for r in rows] == [7, 7, 8, 8, 9, 9]
    assert rows[0]["text"].startswith("1. General public services; 1998-99 › outturn: 46.3; 1999-00 › outturn: 44.1;")
    assert rows[1]["text"].startswith("1. General public services; ") and "2021-22 › outturn: 108.6" in rows[1]["text"]
    # The caption, not only the units lines under it, with every row; the designation badge between them goes.
    assert rows[0]["breadcrumb"].endswith("4_2 › Table 4.2 Public sector expenditure on services by function, "
                                          "1998-99 to 2021-22: £ billion: accruals basis")


def test_age_bands_named_by_numbers_head_their_columns(plain):
    # DWP FRS 7.3: the last column is `85+`, which has no letter in it.
    rows = chunks(STATS / "c7-savings-7-3.xlsx", plain)
    assert len(rows) == 4 and rows[2]["text"].endswith("75 to 84: 4; 85+: 8")
    assert rows[0]["text"].startswith("Type of savings and investments: Any type of account (including POCAs); "
                                      "All households: 96;")


def test_rows_with_no_header_for_their_values_are_omitted_unless_pinned_headerless(tmp_path, plain):
    # No line of names: every row holds numbers, so the values would go out as `Column B: 12`.
    rows = [["Coke", 12, 3.5, "tonnes of supply"], ["Briquettes", 3, 0.5, "tonnes of demand"],
            ["Petrol", 40, 11.0, "kilolitres of supply"]]
    path = book(tmp_path / "no-header.xlsx", {"Sheet1": rows})
    out = chunks(path, plain)
    assert [r["omit_reason"].split(":")[0] for r in out] == ["no_header"] * 3
    assert "no header was found for their columns" in out[0]["omit_reason"]
    pinned = plain.model_copy(update={"header_rows": [{"file": "no-header.xlsx", "sheet": "*", "header_row": 0}]})
    assert [r["omit_reason"] for r in chunks(path, pinned)] == [None] * 3
    off = plain.model_copy(update={"no_header_ratio": None})
    assert [r["omit_reason"] for r in chunks(path, off)] == [None] * 3


def test_a_header_line_filled_down_and_a_row_of_series_codes_are_header_not_data(plain):
    # ONS Output in the Construction Industry, Table 1a: four header lines (the third and fourth filled down
    # from vertical merges), then a row of CDID series codes (`MV36 | MV37 | …`), then the years.
    rows = chunks(STATS / "construction-table-1a.xlsx", plain)
    assert [r["row"] for r in rows] == [11, 12, 13, 14]
    assert rows[0]["text"].startswith(
        "Period: 1997; New Housing › Public: 35.7; New Housing › Private: 46.9; Total Housing: 45.3; "
        "Other New Work › Infrastruc-ture: 63.1; Other New Work › Excluding Infrastructure › Public: 56.5;")
    assert not any("MV36" in r["text"] for r in rows)
    # The index base above the header (`2018=100`) is its units line: it goes out with every row.
    assert rows[0]["breadcrumb"].endswith("Table 1a › 2018=100")
    stats = json.loads(rows[0]["doc_stats"])
    assert stats["excel_code_rows_skipped"] == 1 and stats["excel_repeated_headers_skipped"] == 1


def test_time_series_attribute_rows_give_each_column_its_unit_and_are_no_rows(plain):
    # ABS 6202.0 Table 21 (Data1): series descriptions, then nine rows keyed Unit, Series Type, … Series ID
    # above the quarters.
    rows = chunks(STATS / "abs-6202-data1.xlsx", plain)
    assert [r["row"] for r in rows] == [11, 12, 13, 14]
    assert rows[0]["text"].startswith("Dec-1984; Quarterly hours worked in all jobs (000 Hours): 2923556.5; "
                                      "Quarterly hours worked in all jobs › Market (000 Hours): 2359941.4;")
    assert not any("Seasonally Adjusted" in r["text"] or "A84426298K" in r["text"] for r in rows)
    assert json.loads(rows[0]["doc_stats"])["excel_attribute_rows_skipped"] == 9


def test_rows_led_by_repeated_text_above_rows_led_by_numbers_stay_data(tmp_path, plain):
    # ONS birth characteristics, table 17's shape: `Total` rows first, then rows per number of children.
    path = book(tmp_path / "births.xlsx", {"17": [
        ["Previous children", "Place of birth", "All ages", "Under 20"],
        ["Total", "Total", 619806, 14017], ["Total", "NHS establishments", 600289, 13547],
        [0, "Total", 5200, 300], [0, "NHS establishments", 5100, 290], [1, "Total", 4100, 120]]})
    rows = chunks(path, plain)
    assert [r["row"] for r in rows] == [2, 3, 4, 5, 6]
    assert rows[0]["text"] == "Previous children: Total; Place of birth: Total; All ages: 619806; Under 20: 14017"


def test_unnamed_text_columns_before_the_values_go_out_bare_and_dot_leaders_go(tmp_path, plain):
    # ONS trade in services: `NUTS1 area | (blank) | Manufacturing | …` over `North East | Imports | 558 | …`.
    path = book(tmp_path / "trade.xlsx", {"1": [
        ["NUTS1 area", None, "Manufacturing", "Mining"],
        ["North East . . . . . .", "Imports", 558, 404], ["North East", "Exports", 612, 380]]})
    rows = chunks(path, plain)
    assert [r["text"] for r in rows] == ["NUTS1 area: North East; Imports; Manufacturing: 558; Mining: 404",
                                         "NUTS1 area: North East; Exports; Manufacturing: 612; Mining: 380"]


def test_a_header_repeated_inside_the_data_is_never_a_row(tmp_path, plain):
    # Printed tables repeat their header at each page break.
    head = ["Area", "Year", "Deaths"]
    path = book(tmp_path / "paged.xlsx", {"T": [head, ["Wales", 2001, 3], ["Wales", 2002, 1], head,
                                                ["Scotland", 2001, 7]]})
    rows = chunks(path, plain)
    assert [r["row"] for r in rows] == [2, 3, 5] and rows[2]["text"] == "Area: Scotland; Year: 2001; Deaths: 7"
    assert json.loads(rows[0]["doc_stats"])["excel_repeated_headers_skipped"] == 1


def test_a_corner_merged_down_ties_three_header_lines_and_centred_labels_head_their_columns(tmp_path):
    # BLS CPS Table 22's shape: `Characteristic` merged down the header block, a note line above it, group
    # labels centred across their columns (Excel's "centre across selection", not a merge).
    from openpyxl.styles import Alignment

    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "cps"
    for r in (["[Numbers in thousands]"], [],
              ["Characteristic", "Total at work", "Worked 1 to 34 hours", None, "Average hours", None],
              [None, None, "Total", "For economic reasons", "Total at work", "Persons who usually work full time"],
              ["Men", 79848, 13968, 2126, 40.4, 42.8], ["Women", 70025, 19712, 1745, 36.5, 40.8]):
        ws.append(r)
    ws.merge_cells("A3:A4")
    ws.merge_cells("B3:B4")
    for ref in ("C3", "D3", "E3", "F3"):
        ws[ref].alignment = Alignment(horizontal="centerContinuous")
    wb.save(tmp_path / "cps.xlsx")
    tables = _tables(tmp_path / "cps.xlsx", ExcelConfig())
    assert tables[0][2] == ["Characteristic", "Total at work", "Worked 1 to 34 hours › Total",
                            "Worked 1 to 34 hours › For economic reasons", "Average hours › Total at work",
                            "Average hours › Persons who usually work full time"]
    assert [t[4] for t in tables] == [5, 6]


def test_a_label_left_of_empty_cells_without_centring_heads_only_its_own_column(tmp_path):
    path = book(tmp_path / "plain.xlsx", {"s": [
        ["Area", "Counts", None, "Rates", None],
        [None, "Men", "Women", "Men", "Women"],
        ["North", 10, 12, 0.5, 0.6]]})
    headers = _tables(path, ExcelConfig())[0][2]
    assert headers[1] == "Counts › Men" and headers[2] == "Women"  # no merge, no centring: nothing says more

