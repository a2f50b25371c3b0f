"""jobs.excel.records: a row under excel.min_words that is a record of its table is kept; a note spilled
across the cells under a table, a row of names whose values are all marked missing and a value of the
wrong kind keep their `min_words` omission, with the reason a person can check."""

import openpyxl

from tests.excel.conftest import READXL, book, chunks

_PREFIX = "min_words: {} words, fewer than excel.min_words=8; not a record of its table: "

INVENTORY = [
    ["Item", "Qty", "Where"],
    ["Winter tyres", 4, "Basement"],     # 2: 7 words, a record
    ["Garden chairs", 6, "Shed"],        # 3
    ["Camping stove", 1, "Garage"],      # 4
    ["Bike", "two", "Hall"],             # 5: text where the table holds numbers
    ["Ski boots", 2, "Loft"],            # 6
    [None, "at the", "bottom,"],         # 7: a note written across the cells under the table
    ["Tent", 1, None, "later"],          # 8: a cell in a column no other row fills
]


def test_a_short_record_is_kept_and_what_is_no_record_is_omitted_with_why(tmp_path, plain):
    rows = chunks(book(tmp_path / "inventory.xlsx", {"Stuff": INVENTORY}), plain)
    by_row = {r["row"]: r for r in rows}
    for n in (2, 3, 4, 6):
        assert not by_row[n]["omitted"], by_row[n]["omit_reason"]
    assert by_row[2]["text"] == "Item: Winter tyres; Qty: 4; Where: Basement"
    assert by_row[5]["omit_reason"] == _PREFIX.format(6) + (
        "'two' in column B (Qty) is text, where 5 of the 6 other rows that fill it hold numbers, dates or booleans")
    assert by_row[7]["omit_reason"] == _PREFIX.format(5) + (
        "it starts in column B (Qty), where the table's other rows hold values, not the names they start with")
    assert by_row[8]["omit_reason"] == _PREFIX.format(7) + "'later' is in column D, which no other row near it fills"
    assert {by_row[n]["quality"] for n in (5, 7, 8)} == {"fragment"}


def test_without_the_other_rows_a_short_row_stays_omitted(tmp_path, plain):
    rows = chunks(book(tmp_path / "one.xlsx", {"Stuff": INVENTORY[:3]}), plain)
    assert [r["omit_reason"] for r in rows] == [
        _PREFIX.format(7).replace("not a record of its table: ", "not shown to be a record of its table: ")
        + "1 other row(s) of the table near it to compare it with, fewer than 2"] * 2


def test_a_row_of_names_whose_values_are_all_missing_is_no_record(tmp_path, plain):
    """`2010 | Jan | : | :` under `Period` merged over the year and month columns: the row's names, no value."""
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "Output"
    for r in [["Period", None, "Housing", "Repairs"], [2010, "Jan", ":", ":"], [None, "Feb", 10.5, 3.25],
              [None, "Mar", 11.5, 2.75], [None, "Apr", 9.5, 3]]:
        ws.append(r)
    ws.merge_cells("A1:B1")
    wb.save(tmp_path / "output.xlsx")
    rows = chunks(tmp_path / "output.xlsx", plain)
    by_row = {r["row"]: r for r in rows}
    assert by_row[2]["omit_reason"] == _PREFIX.format(3) + (
        "it holds only names ('2010', 'Jan'), no value in the columns where the table's other rows hold theirs")
    assert [by_row[n]["omitted"] for n in (3, 4, 5)] == [False] * 3


def test_notes_spilled_under_readxl_deaths_stay_omitted(plain):
    rows = chunks(READXL / "deaths.xlsx", plain)
    why = {(r["sheet"], r["row"]): r["omit_reason"] for r in rows}
    assert why[("arts", 18)] == _PREFIX.format(6) + (
        "it starts in column C (Age), where the table's other rows hold values, not the names they start with")
    assert why[("other", 19)] == _PREFIX.format(6) + (
        "it starts in column C (Age), where the table's other rows hold values, not the names they start with")
    assert sum(why[k] is None for k in why) == 20  # the 20 people, as before


def test_a_long_table_streams_through_in_order_and_tables_are_judged_apart(tmp_path, plain):
    """Rows are held back at most jobs.excel.records._NEIGHBOURS at a time: a table longer than the window
    keeps its order and every short record, first and last included; a table after a blank gap is judged by
    its own rows, not the one above it."""
    long = [["Part", "Bin", "Shelf"]] + [[f"Bolt {i}", i, "North wall"] for i in range(1, 101)]
    second = [["Name", "Age"], ["Ann", 31], ["Bo", "seven"], ["Cy", 40], ["Di", 25]]
    rows = chunks(book(tmp_path / "parts.xlsx", {"Parts": long + [[None]] + second}), plain)
    assert [r["row"] for r in rows] == list(range(2, 102)) + list(range(104, 108))
    assert not any(r["omitted"] for r in rows[:100])
    assert rows[0]["text"] == "Part: Bolt 1; Bin: 1; Shelf: North wall"
    by_row = {r["row"]: r for r in rows}
    assert [by_row[n]["omitted"] for n in (104, 106, 107)] == [False] * 3
    assert by_row[105]["omit_reason"] == _PREFIX.format(4) + (
        "'seven' in column B (Age) is text, where 3 of the 3 other rows that fill it hold numbers, dates or booleans")


def test_a_sheet_streams_through_holding_back_at_most_the_window():
    """keep_short_records reads at most _NEIGHBOURS drafts ahead of the one it gives out."""
    from types import SimpleNamespace

    from jobs.excel import records

    table = SimpleNamespace(headers=["Item", "Qty"], named=lambda c: c < 2)
    pulled = []

    def drafts():
        for i in range(200):
            pulled.append(i)
            yield SimpleNamespace(table=table, cells=[f"thing {i}", str(i)], kinds=[1, 2], verdict=None)

    out = records.keep_short_records(drafts())
    for k in range(5):
        next(out)
        assert len(pulled) <= k + 1 + records._NEIGHBOURS
    assert len(list(out)) == 195
