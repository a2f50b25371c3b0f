"""jobs.excel.titles: a table's title is its caption and what qualifies it, not the notes around it."""

from jobs.config import ExcelConfig
from tests.excel.conftest import book
from tests.excel.test_tables import _tables


def _title_of(tmp_path, lines: list[list]) -> str | None:
    path = book(tmp_path / "t.xlsx", {"s": [*lines, ["Area", "Count", "Rate"], ["North", 120, 3.5], ["South", 80, 2.5]]})
    return _tables(path, ExcelConfig())[0][3]


def test_a_table_s_caption_is_its_title_with_the_units_under_it_and_not_the_notes_around_it(tmp_path):
    # HM Treasury PESA 4.3: the caption four lines up; a designation badge and units between it and the header.
    assert _title_of(tmp_path, [["Table 4.3 Spending by function in real terms, 1998-99 to 2021-22"],
                                ["National Statistics"], ["£ billion"], [None]]) == \
        "Table 4.3 Spending by function in real terms, 1998-99 to 2021-22: £ billion"
    # ONS: a worksheet caption over the sheet's notes and its source; ABS: a release line above the caption.
    assert _title_of(tmp_path, [["Worksheet 2: Live births by month of occurrence, England and Wales"],
                                ["This worksheet contains one table."], ["[note 1] refers to cell A8"],
                                ["Source: Office for National Statistics"]]) == \
        "Worksheet 2: Live births by month of occurrence, England and Wales"
    assert _title_of(tmp_path, [["Australian Bureau of Statistics"], ["Released at 11.30am 23 February 2018"],
                                ["Table 1.1 Supply of Energy, Australia (Petajoules), 2015-16"]]) == \
        "Table 1.1 Supply of Energy, Australia (Petajoules), 2015-16"


def test_without_a_caption_the_three_nearest_lines_that_are_not_notes_and_key_value_lines_make_the_title(tmp_path):
    # ONS forces of nature: a long title over numbered notes and a source line.
    assert _title_of(tmp_path, [["Back to Contents"],
                                ["Number of deaths and crude mortality rates from exposure to forces of nature by sex, "
                                 "England and Wales, 2001 to 2018"],
                                ["1 Underlying cause of death was defined using the ICD-10 codes listed"],
                                ["Source: Office for National Statistics"], [None]]).startswith("Number of deaths")
    # A BLS series report: what every row is, as `key: value` lines above the table.
    path = book(tmp_path / "series.xlsx", {"BLS Data Series": [
        ["Labor Force Statistics from the Current Population Survey"], [None], ["Original Data Value"], [None],
        ["Series Id:", "LNS11300000"], ["Seasonally Adjusted"], ["Series title:", "(Seas) Labor Force Participation Rate"],
        ["Type of data:", "Percent or rate"], ["Years:", "2000 to 2020"], [None],
        ["Year", "Jan", "Feb", "Mar"], [2019, 63.1, 63.2, 63.0], [2020, 63.4, 63.3, 62.6]]})
    assert {t[3] for t in _tables(path, ExcelConfig())} == {
        "Labor Force Statistics from the Current Population Survey: Original Data Value: Seasonally Adjusted; "
        "Series Id: LNS11300000; Series title: (Seas) Labor Force "
        "Participation Rate; Type of data: Percent or rate; Years: 2000 to 2020"}


def test_a_bare_table_number_takes_the_line_under_it_and_titles_that_only_look_like_notes_stay(tmp_path):
    assert _title_of(tmp_path, [["Table 3"], ["Persons at work in nonagricultural industries by age, sex, race, "
                                             "Hispanic or Latino ethnicity and marital status"]]) == \
        ("Table 3: Persons at work in nonagricultural industries by age, sex, race, Hispanic or Latino ethnicity "
         "and marital status")
    assert _title_of(tmp_path, [["Sources of gross household income by region, 2021"], ["£ per week"]]) == \
        "Sources of gross household income by region, 2021: £ per week"
    assert _title_of(tmp_path, [["10 largest employers in the region by number of staff, 2022"]]) == \
        "10 largest employers in the region by number of staff, 2022"
