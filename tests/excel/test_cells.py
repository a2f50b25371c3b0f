from jobs.excel.cells import clean_header, clean_label, clean_text, is_missing, unglue_digits


def test_headers_are_cleaned_into_words_and_placeholders_dropped():
    assert clean_header("Sepal.Length") == "Sepal Length" and clean_header("first_name") == "first name"
    assert clean_header("dateOfBirth") == "date of birth" and clean_header("iPhone") == "iPhone"
    assert clean_header("Unnamed: 3") == "" and clean_header("Column12") == "" and clean_header("<b>Name</b>") == "Name"
    assert clean_header("mpg") == "mpg"


def test_cell_text_decodes_ooxml_escapes_drops_tags_and_keeps_comparisons():
    assert clean_text("a_x000D_\nb") == "a b"
    assert clean_text("one<br>two </b>") == "one two"
    assert clean_text("x < 5 and a<b") == "x < 5 and a<b"


def test_footnote_markers_leave_published_labels():
    assert clean_header("Year\n[Note 1]") == "Year" and clean_header("Response not clear(a)") == "Response not clear"
    assert clean_header("Real terms (1)\n£ billion") == "Real terms £ billion" and clean_label(" 2015 *") == "2015"
    assert clean_header("Rate of injuries\n [Note 7] [Note 11] \n[Note 14]") == "Rate of injuries"
    assert clean_header("Altitude (m)") == "Altitude (m)"  # a unit, not a footnote
    assert unglue_digits(["Revenue1", "Population2", ""]) == ["Revenue", "Population", ""]
    assert unglue_digits(["var1", "var2"]) == ["var1", "var2"]  # names that differ by their digit
    assert unglue_digits(["Covid19", "Q1"]) == ["Covid19", "Q1"]


def test_missing_value_marks_are_no_values_and_dashes_only_name_nothing():
    assert all(is_missing(m) for m in ("..", "N/A", "[x]", "[c]", "np", " .. "))
    assert not is_missing("x") and not is_missing("0") and not is_missing("-")  # `x | y`; a dash is nil
    assert is_missing("—", dashes=True) and clean_header("N/A") == "" and clean_header("-") == ""


def test_dot_leaders_leave_labels_and_dots_alone_stay_missing_marks():
    assert clean_text("December . . . . . . .") == "December" and clean_text("Total.........") == "Total"
    assert clean_text("Coal……") == "Coal" and clean_text("Coke . . . . 12") == "Coke 12"
    assert clean_text("...") == "..." and is_missing(clean_text("..")) and clean_text("1.5") == "1.5"
    assert clean_text("e.g. this") == "e.g. this"


def test_a_label_written_as_a_path_with_semicolons_reads_as_levels():
    # ABS time series: `Quarterly hours worked in all jobs ;  Market ;  > Mining ;`
    assert clean_header("Quarterly hours worked in all jobs ;  Market ;  > Mining ;") == (
        "Quarterly hours worked in all jobs › Market › Mining")
