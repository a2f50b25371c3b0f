"""jobs.excel.formats: cell values read the way the workbook shows them."""

import datetime as dt

from jobs.excel.formats import format_value


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


def test_text_format_zero_padding_and_digit_groups_show_every_digit():
    assert format_value(12345, "@") == "12345"  # a number in a Text-formatted cell (an ID column)
    assert format_value(2134, "00000") == "02134"  # a ZIP code keeps its leading zero
    assert format_value(7, "000-00-0000") == "000-00-0007" and format_value(123456789, "000-00-0000") == "123-45-6789"
    assert format_value(5551234567, "(000) 000-0000") == "(555) 123-4567"
    assert format_value(15551234567, "(000) 000-0000") == "(1555) 123-4567"  # the first group takes the rest
    assert format_value(3.5, "00") == "04" and format_value(-5, "0") == "-5"


def test_a_format_with_conditions_takes_the_section_whose_condition_holds():
    phone = "[<=9999999]###-####;(###) ###-####"  # Excel's built-in Phone Number format
    assert format_value(5551234567, phone) == "(555) 123-4567" and format_value(1234567, phone) == "123-4567"
    assert [format_value(v, '[>10]"big";"small"') for v in (50, 5)] == ["big", "small"]


def test_halves_round_away_from_zero_as_excel_shows_them():
    # Python's float formatting rounds a half to even (31.2%, 1,234, 0); Excel rounds it away from zero.
    assert format_value(0.3125, "0.0%") == "31.3%"
    assert format_value(1234.5, "#,##0") == "1,235"
    assert format_value(-0.5, "0") == "-1"
    assert format_value(1.005, "0.00") == "1.01"  # from 15 significant digits, as Excel reads 1.005
    assert format_value(0.1 + 0.2, "0.00") == "0.30"
