"""jobs.excel.filters: each row filter omits what it should, and says why in words a person can check."""

from tests.excel.conftest import book, chunks

FILTER_ROWS = [
    ["Item", "Description", "Amount", "Notes"],
    ["Nut", "A hexagonal nut for the M8 bolts that hold the frame", 5, None],   # 2: kept
    ["Widget", None, None, None],                                               # 3: min_fields
    ["Total", "-----", None, None],                                             # 4: structural label, no number
    ["-----", "-----", "-----", None],                                          # 5: separators
    [None, None, 12, 3.5],                                                      # 6: min_words (headers describe it)
    ["Bolt", "steel", 3, None],                                                 # 7: 6 words, but a record: kept
    ["Gear", " ".join(["tooth"] * 250), 9, None],                               # 8: max_words
    ["Chapter 1", "Section 2", None, None],                                     # 9: structural labels only
    [None, "see the", "notes", None],                                           # 10: min_words (a note, no record)
]


def test_each_filter_rule_records_its_reason(tmp_path, plain):
    rows = chunks(book(tmp_path / "filters.xlsx", {"Parts": FILTER_ROWS}), plain)
    by_row = {r["row"]: r for r in rows}
    assert not by_row[2]["omitted"] and by_row[2]["omit_reason"] is None
    # Under excel.min_words, but a record of its table (jobs.excel.records): kept.
    assert not by_row[7]["omitted"] and by_row[7]["text"] == "Item: Bolt; Description: steel; Amount: 3"
    expect = {
        3: ("fragment", "min_fields: 1 non-empty cell(s), fewer than excel.min_fields=2"),
        10: ("fragment", "min_words: 5 words, fewer than excel.min_words=8; not a record of its table: it starts in "
                         "column B (Description), where the table's other rows hold values, not the names they "
                         "start with"),
        4: ("context_dead", "structural: its only text is 'Total', matching excel.structural_patterns"),
        5: ("context_dead", "structural: only separators ('-----', '-----', '-----'), matching excel.structural_patterns"),
        8: ("too_long", "max_words: 255 words, more than excel.max_words=200"),
        9: ("context_dead", "structural: its only text is 'Chapter 1', 'Section 2', matching excel.structural_patterns"),
    }
    for n, (quality, reason) in expect.items():
        assert (by_row[n]["omitted"], by_row[n]["quality"], by_row[n]["omit_reason"]) == (True, quality, reason)
    assert by_row[6]["omitted"] and by_row[6]["omit_reason"].startswith("min_words:")


def test_numbers_without_any_header_are_context_dead(tmp_path, plain):
    rows = chunks(book(tmp_path / "bare.xlsx", {"Data": [[1, 2.5, 3], [4, 5.5, 6], [7, 8.5, 9]]}), plain)
    assert rows and all(r["omitted"] and r["omit_reason"].startswith("numeric: 3 of 3 cells") for r in rows)


def test_filter_rules_are_configurable(tmp_path, plain):
    loose = plain.model_copy(update={"min_fields": 1, "min_words": 0, "max_words": 1000, "numeric_ratio": None,
                                     "structural_patterns": []})
    rows = chunks(book(tmp_path / "filters.xlsx", {"Parts": FILTER_ROWS}), loose, excel_fragment_words=0)
    omitted = {r["row"]: r["omit_reason"] for r in rows if r["omitted"]}
    assert omitted == {}


def test_a_total_row_with_its_figures_is_data_not_structure(tmp_path, plain):
    """"Total" over a column's sums states figures no other row does (what was spent in all): embedded.
    A "Total" with no number beside it stays structural."""
    rows = chunks(book(tmp_path / "budget.xlsx", {"Q": [["Region", "Q1", "Q2", "Q3", "Q4"], ["North", 1, 2, 3, 4],
                                                        ["South", 5, 6, 7, 8], ["Total", 6, 8, 10, 12],
                                                        ["Totals:", "-----", None, None, None]]}), plain)
    by_row = {r["row"]: r for r in rows}
    assert not by_row[4]["omitted"] and by_row[4]["text"] == "Region: Total; Q1: 6; Q2: 8; Q3: 10; Q4: 12"
    assert by_row[5]["omit_reason"].startswith("structural: its only text is 'Totals:'")
