"""jobs.excel.render: every row as text, by a template that fits its table or as `Header: value; …`."""

from jobs.config import ExcelConfig
from tests.excel.conftest import BOOK, READXL, TEMPLATES, book, chunks, on_sheet


def test_real_workbook_rows_carry_their_headers(plain):
    rows = chunks(BOOK, plain)
    assert {r["sheet"] for r in rows} == {"Stanley Cups", "Stanley Cups Since 67"}
    assert "Team: Maple Leafs; Location: TOR; Stanley Cups: 13" in [r["text"] for r in rows]
    # configs/templates/stanley-cups.yaml turns the same rows into sentences (and lifts them out of the
    # fragment band: 7 words as `Header: value` pairs).
    templated = chunks(BOOK, ExcelConfig(templates_dir=TEMPLATES))
    assert "The Blues hockey team (STL) has won 1 Stanley Cups." in [c["text"] for c in templated]
    assert not any(c["omitted"] for c in templated)
    first = rows[0]
    # The title row "Stanley Cups" repeats the sheet name, so it is not added to the heading path.
    assert first["heading_path"] == ["stanley-cups.xlsx", "Stanley Cups"]
    assert first["sheet"] == "Stanley Cups" and first["row"] == 3


def test_mtcars_rows_name_every_column_next_to_its_value(plain):
    rows = on_sheet(chunks(READXL / "datasets.xlsx", plain), "mtcars")
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
    rows = on_sheet(chunks(READXL / "datasets.xlsx", ExcelConfig(templates_dir=TEMPLATES)), "mtcars")
    assert rows[0]["text"] == (
        "A car that does 21 miles per US gallon has 6 cylinders, a displacement of 160 cubic inches and 110 gross "
        "horsepower, a V-shaped engine and manual transmission; it weighs 2.62 thousand pounds, covers a quarter "
        "mile in 16.46 seconds, has 4 forward gears and 4 carburetors, with a rear axle ratio of 3.9.")
    assert all(not r["omitted"] and "template:mtcars" in r["tags"] for r in rows)


def test_a_contents_sheet_reads_as_keys_and_their_descriptions(tmp_path, plain):
    # ABS 4604.0's Contents sheet: `1.1 | Supply of Energy, Australia, 2015-16` with no header over it.
    path = book(tmp_path / "contents.xlsx", {"Contents": [
        ["1.1", "Supply of Energy, Australia, 2015-16 in petajoules by fuel"],
        ["1.2", "Supply of Energy, Australia, 2014-15 in petajoules by fuel"],
        ["Coke", 12, 3.5]]})
    rows = chunks(path, plain)
    assert rows[0]["text"] == "1.1: Supply of Energy, Australia, 2015-16 in petajoules by fuel"
    assert rows[0]["omit_reason"] is None and rows[2]["omit_reason"].startswith("no_header")
