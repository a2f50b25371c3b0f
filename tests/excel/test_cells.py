from jobs.excel.cells import clean_header, clean_text


def test_headers_are_cleaned_into_words_and_placeholders_dropped():
    assert clean_header("Sepal.Length") == "Sepal Length" and clean_header("first_name") == "first name"
    assert clean_header("dateOfBirth") == "date of birth" and clean_header("iPhone") == "iPhone"
    assert clean_header("Unnamed: 3") == "" and clean_header("Column12") == "" and clean_header("<b>Name</b>") == "Name"
    assert clean_header("mpg") == "mpg"


def test_cell_text_decodes_ooxml_escapes_drops_tags_and_keeps_comparisons():
    assert clean_text("a_x000D_\nb") == "a b"
    assert clean_text("one<br>two </b>") == "one two"
    assert clean_text("x < 5 and a<b") == "x < 5 and a<b"
