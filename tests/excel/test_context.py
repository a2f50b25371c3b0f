"""jobs.excel.context: group labels given once and section lines go with every row they label."""

import json

from tests.excel.conftest import READXL, STATS, book, chunks


def test_a_group_label_given_on_its_first_row_goes_with_the_rows_below(tmp_path, plain):
    # ONS deaths from forces of nature, Table 2's shape: country and sex on a group's first row only.
    path = book(tmp_path / "deaths.xlsx", {"Table 2": [
        ["Country", "Sex", "Registration Year", "Deaths"],
        ["England and Wales", "Male", 2001, 64], [None, None, 2002, 52],
        ["Wales", "Female", 2001, 3], [None, None, 2002, 1]]})
    rows = chunks(path, plain)
    assert json.loads(rows[0]["doc_stats"])["excel_rows_given_group_labels"] == 2
    assert [r["text"] for r in rows] == [
        "Country: England and Wales; Sex: Male; Registration Year: 2001; Deaths: 64",
        "Country: England and Wales; Sex: Male; Registration Year: 2002; Deaths: 52",
        "Country: Wales; Sex: Female; Registration Year: 2001; Deaths: 3",
        "Country: Wales; Sex: Female; Registration Year: 2002; Deaths: 1"]


def test_a_year_given_once_over_its_quarters_goes_with_each_quarter(tmp_path, plain):
    # ONS construction output, Table 3a's quarterly block: `1997 | Q1 | …` then `| Q2 | …`.
    path = book(tmp_path / "quarters.xlsx", {"3a": [
        ["Year", "Quarter", "Public", "Private"],
        [1997, "Q1", 6.7, 0.5], [None, "Q2", 3.3, 2.7], [1998, "Q1", -4.4, -7.9]]})
    texts = [r["text"] for r in chunks(path, plain)]
    assert texts[1] == "Year: 1997; Quarter: Q2; Public: 3.3; Private: 2.7"


def test_section_lines_head_the_rows_under_them_and_footnotes_do_not(tmp_path, plain):
    # English Housing Survey DA3203's shape: an unnamed row-header column, section lines in it.
    path = book(tmp_path / "ehs.xlsx", {"2020": [
        [None, "non-decent", "households (000s)"],
        ["household composition", None, None],
        ["couple under 60", 13.7, 4098], ["couple 60 or over", 13.5, 4095],
        ["age of oldest person", None, None],
        ["under 60 years", 14.9, 14386],
        ["(a) Includes blank responses", None, None],
        ["all households", 14.1, 23868]]})
    rows = chunks(path, plain)
    assert json.loads(rows[0]["doc_stats"])["excel_section_lines"] == 2
    texts = {r["row"]: r["text"] for r in rows if r["omit_reason"] is None}
    assert texts[3] == "household composition › couple under 60; non-decent: 13.7; households (000s): 4098"
    assert texts[6] == "age of oldest person › under 60 years; non-decent: 14.9; households (000s): 14386"
    assert "Includes blank responses" not in texts[8]  # a footnote is no section


def test_tidy_tables_carry_nothing_into_their_blank_cells(plain):
    # readxl deaths.xlsx: notes written across the last rows of a table of people are no group rows,
    # and a named first column's lone value (type-me) heads nothing.
    rows = chunks(READXL / "deaths.xlsx", plain)
    assert not any(r["omit_reason"] is None and "at the" in r["text"] for r in rows)
    assert not any(" › " in r["text"] for r in rows)


# Slices of published tables (tests/data/xlsx/stats/LICENSE.md).

def test_ons_country_and_sex_given_once_reach_every_year(plain):
    rows = chunks(STATS / "ons-disaster-deaths-table2.xlsx", plain)
    assert [r["row"] for r in rows] == list(range(11, 17))
    assert all(r["text"].startswith("Country: England and Wales; Sex: Male; Registration Year: ") for r in rows)
    assert rows[1]["text"].startswith("Country: England and Wales; Sex: Male; Registration Year: 2002; Deaths: 52;")


def test_english_housing_survey_sections_head_their_rows(plain):
    rows = {r["row"]: r for r in chunks(STATS / "ehs-households-2020.xlsx", plain)}
    assert rows[8]["text"].startswith("household composition › couple under 60; non-decent: 13.7;")
    assert rows[17]["text"].startswith("income groups › 1st quintile (lowest); non-decent: 19.7;")
    assert rows[10]["omit_reason"].startswith("min_fields")  # the section line itself is no row


def _indented(path, rows: list[list], indents: dict[int, int], merges: tuple[str, ...] = ()):
    """A workbook of `rows` whose first cells are indented by Excel's alignment: {row number: steps}."""
    import openpyxl
    from openpyxl.styles import Alignment

    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "Table 22"
    for r in rows:
        ws.append(r)
    for number, steps in indents.items():
        ws.cell(number, 1).alignment = Alignment(indent=steps)
    for ref in merges:
        ws.merge_cells(ref)
    wb.save(path)
    return path


def test_an_indented_label_carries_the_labels_it_is_indented_under(tmp_path, plain):
    # BLS CPS Table 22's shape: the men's and women's age groups share their labels, told apart by indenting
    # them under `Men, 16 years and over` and `Women, …`; a lone `Women, …` line heads the rows below it.
    path = _indented(tmp_path / "cps.xlsx", [
        ["Characteristic", "Total at work", "Part time"],
        ["Men, 16 years and over", 79848, 13968],
        ["16 to 19 years", 2607, 1738],
        ["16 to 17 years", 959, 820],
        ["20 years and over", 77241, 12230],
        ["Women, 16 years and over", None, None],
        ["16 to 19 years", 2653, 2070]], {3: 1, 4: 2, 5: 1, 7: 1})
    rows = chunks(path, plain)
    texts = {r["row"]: r["text"] for r in rows if r["omit_reason"] is None}
    assert texts[2] == "Characteristic: Men, 16 years and over; Total at work: 79848; Part time: 13968"
    assert texts[3] == "Characteristic: Men, 16 years and over › 16 to 19 years; Total at work: 2607; Part time: 1738"
    assert texts[4].startswith("Characteristic: Men, 16 years and over › 16 to 19 years › 16 to 17 years;")
    assert texts[5].startswith("Characteristic: Men, 16 years and over › 20 years and over;")
    assert texts[7].startswith("Characteristic: Women, 16 years and over › 16 to 19 years;")
    assert json.loads(rows[0]["doc_stats"])["excel_rows_given_parents"] == 4


def test_a_merged_indented_label_over_its_years_is_one_parent_not_a_chain_of_siblings(tmp_path, plain):
    # FBI crime table's shape: each state indented under its division, merged down over its two years.
    path = _indented(tmp_path / "crime.xlsx", [
        ["Area", "Year", "Population"],
        ["New England", 2015, 14710229],
        ["Connecticut", 2015, 3584730], [None, 2016, 3576452],
        ["Maine", 2015, 1329453], [None, 2016, 1331479]], {3: 1, 5: 1}, merges=("A3:A4", "A5:A6"))
    texts = [r["text"].split(";")[0] for r in chunks(path, plain) if r["omit_reason"] is None]
    assert texts == ["Area: New England", "Area: New England › Connecticut", "Area: New England › Connecticut",
                     "Area: New England › Maine", "Area: New England › Maine"]


def test_leading_spaces_from_three_on_are_steps_but_a_stray_space_and_csv_padding_are_not(tmp_path, plain):
    # FBI crime table's states: five spaces in; `  York`: two stray ones.
    path = book(tmp_path / "areas.xlsx", {"s": [["Area", "Households", "Vacant"], ["North", 5000, 120],
                                                ["     Leeds", 2100, 40], ["  York", 900, 15]]})
    texts = [r["text"].split(";")[0] for r in chunks(path, plain) if r["omit_reason"] is None]
    assert texts == ["Area: North", "Area: North › Leeds", "Area: York"]
    csv = tmp_path / "areas.csv"  # right-justified text pads with spaces: no level in a CSV file
    csv.write_text("Area,Households,Vacant\n    North,5000,120\n Southwest,2100,40\n    South,900,15\n")
    assert [r["text"].split(";")[0] for r in chunks(csv, plain)] == ["Area: North", "Area: Southwest", "Area: South"]


def test_totals_belong_to_no_row_above_and_a_closing_total_heads_nothing(tmp_path, plain):
    path = _indented(tmp_path / "totals.xlsx", [
        ["Group", "Employed", "Unemployed"],
        ["Men", None, None], ["Full time", 40, 2], ["Total", 50, 3],
        ["Women", None, None], ["Full time", 30, 1], ["Total", 70, 4],
        ["Total", 150, 7], ["Carrots", 5, 1]], {3: 1, 4: 1, 6: 1, 7: 1, 9: 1})
    texts = {r["row"]: r["text"].split(";")[0] for r in chunks(path, plain) if r["omit_reason"] is None}
    assert texts[3] == "Group: Men › Full time" and texts[7] == "Group: Total"  # not `Women › Total`
    assert texts[8] == "Group: Total" and texts[9] == "Group: Carrots"  # the grand total closes the groups


def test_right_aligned_indents_are_no_levels_and_numbered_labels_are_parents(tmp_path, plain):
    import openpyxl
    from openpyxl.styles import Alignment

    wb = openpyxl.Workbook()
    ws = wb.active
    for r in (["Item", "2021", "2022"], ["1. General public services", 46.3, 44.1], ["of which: debt interest", 20.1, 21.0],
              ["Paris", 3, 4], ["Rome", 5, 6]):
        ws.append(r)
    ws["A3"].alignment = Alignment(indent=1)
    ws["A5"].alignment = Alignment(horizontal="right", indent=1)
    wb.save(tmp_path / "r.xlsx")
    texts = {r["row"]: r["text"].split(";")[0] for r in chunks(tmp_path / "r.xlsx", plain) if r["omit_reason"] is None}
    assert texts[3] == "Item: 1. General public services › of which: debt interest"
    assert texts[5] == "Item: Rome"


def test_section_lines_nest_by_their_indent(tmp_path, plain):
    # ABS 6306.0 Table 1's shape: an unnamed row-header column; a measure's section over an indented sex's.
    path = _indented(tmp_path / "abs.xlsx", [
        [None, "Adult rate of pay", "Total"],
        ["NUMBER OF EMPLOYEES ('000)", None, None], ["Males", None, None], ["Full-time employees", 3506, 4223],
        ["AVERAGE WEEKLY TOTAL CASH EARNINGS ($)", None, None], ["Males", None, None],
        ["Full-time employees", 1779, 1720]], {3: 1, 4: 2, 6: 1, 7: 2})
    texts = {r["row"]: r["text"].split(";")[0] for r in chunks(path, plain) if r["omit_reason"] is None}
    assert texts[4] == "NUMBER OF EMPLOYEES ('000) › Males › Full-time employees"
    assert texts[7] == "AVERAGE WEEKLY TOTAL CASH EARNINGS ($) › Males › Full-time employees"
