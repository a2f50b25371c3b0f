import datetime as dt

import openpyxl
import pytest

from jobs.config import ExcelConfig, QualityConfig
from jobs.excel.stage import excel_to_chunks
from jobs.excel.templates import Template, apply_format, load_templates, parse_text, render_fallback
from tests.conftest import REPO

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
PASSES = "The {Pass} pass is in {State}[, connecting {Connects}][, at {Altitude}]."


def _template(text=PASSES, **extra) -> Template:
    return Template.from_dict({"text": text, **extra}, "test.yaml", "test")


def _render(t: Template, headers: list[str], raw: list):
    binding = t.bind(headers)
    shown = ["" if v is None else str(v) for v in raw]
    return None if binding is None else t.render(binding, raw, shown)


def test_optional_segments_vanish_when_their_field_is_empty():
    t = _template()
    headers = ["Pass", "State", "Connects", "Altitude"]
    assert _render(t, headers, ["Tioga", "California", "Yosemite Valley and Mono Lake", "3,031 m"]) == \
        "The Tioga pass is in California, connecting Yosemite Valley and Mono Lake, at 3,031 m."
    assert _render(t, headers, ["Sonora", "California", None, "2,933 m"]) == "The Sonora pass is in California, at 2,933 m."
    assert _render(t, headers, ["Sonora", "California", None, None]) == "The Sonora pass is in California."
    # a required field empty in this row: no sentence (the row falls back to `Header: value`)
    assert _render(t, headers, [None, "California", None, None]) is None


def test_nested_optional_segments_and_escapes():
    t = _template(r"{Name}[ (born {Born}[ in {Place}])] \[{Id}\]")
    headers = ["Name", "Born", "Place", "Id"]
    assert _render(t, headers, ["Ada", "1815", "London", "7"]) == "Ada (born 1815 in London) [7]"
    assert _render(t, headers, ["Ada", "1815", None, "7"]) == "Ada (born 1815) [7]"
    assert _render(t, headers, ["Ada", None, "London", "7"]) == "Ada [7]"


def test_aliases_find_columns_under_other_names():
    t = _template(aliases={"Altitude": ["Elevation", "Height (m)"], "Pass": "Mountain pass"})
    headers = ["mountain_pass", "STATE", "Connects", "Height (m)"]
    assert t.bind(headers) == {"Pass": 0, "State": 1, "Connects": 2, "Altitude": 3}
    assert t.missing(["Pass", "Region"]) == ["State"]
    # `Parent › Child` headers are found by their last part when that part is unique
    assert _template("{Sales} in {Region}").bind(["Region", "2023 › Sales"]) == {"Sales": 1, "Region": 0}
    assert _template("{Sales} in {Region}").bind(["Region", "2022 › Sales", "2023 › Sales"]) is None


def test_per_column_formats():
    assert apply_format(",.0f", 3031.4, "3031.4") == "3,031"
    assert apply_format(".1%", 0.256, "0.256") == "25.6%"
    assert apply_format("%d %B %Y", dt.datetime(1947, 1, 8), "1947-01-08") == "08 January 1947"
    assert apply_format({"map": {0: "automatic", 1: "manual"}}, 1.0, "1") == "manual"
    assert apply_format({"map": {0: "automatic"}}, 5, "5") == "5"
    assert apply_format("upper", "ca", "ca") == "CA"
    assert apply_format(",.0f", "n/a", "n/a") == "n/a"  # text is left as shown
    t = _template(formats={"Altitude": ",.0f", "State": "upper"})
    binding = t.bind(["Pass", "State", "Connects", "Altitude"])
    assert t.render(binding, ["Tioga", "ca", None, 3031.0], ["Tioga", "ca", "", "3031"]) == \
        "The Tioga pass is in CA, at 3,031."


@pytest.mark.parametrize("text, message", [
    ("The {Pass} pass[, at {Altitude}", "unclosed '\\['"),
    ("The {Pass} pass], at", "unmatched '\\]' at character 15"),
    ("The {Pass pass", "stray '\\{' at character 4"),
    ("No columns at all", "names no {Column}"),
])
def test_bad_template_text_is_reported(text, message):
    with pytest.raises(ValueError, match=message):
        _template(text)


def test_bad_template_settings_are_reported():
    with pytest.raises(ValueError, match="unknown key"):
        _template(colour="red")
    with pytest.raises(ValueError, match="format of 'Altitude'"):
        _template(formats={"Altitude": "not a spec"})
    with pytest.raises(ValueError, match="sheet_regex"):
        _template(sheet_regex="(")
    assert parse_text("a {B} c")[1].name == "B"


def test_templates_match_by_file_glob_sheet_and_columns():
    t = _template(file=["passes*.xlsx"], sheet="Pass*")
    assert t.covers("passes-2024.xlsx", "alps/passes-2024.xlsx", "Passes")
    assert t.covers("x.xlsx", "passes-old.xlsx", "passes")  # path or name; sheet globs ignore case
    assert not t.covers("roads.xlsx", "roads.xlsx", "Passes") and not t.covers("passes.xlsx", "passes.xlsx", "Roads")
    r = _template(sheet_regex=r"^(?:OS|Prod)\b")
    assert r.covers("a.xlsx", "a.xlsx", "OS-Rev.and results") and not r.covers("a.xlsx", "a.xlsx", "Reconciliation")
    # file globs are the project's (jobs.sources.globs): `*` stays within one directory, `**` spans them
    assert not _template(file="alps/*.xlsx").covers("p.xlsx", "alps/2024/p.xlsx", "S")
    assert _template(file="alps/**/*.xlsx").covers("p.xlsx", "alps/2024/p.xlsx", "S")


def test_registry_loads_a_directory(tmp_path):
    assert len(load_templates(tmp_path / "missing")) == 0
    (tmp_path / "a.yaml").write_text("name: passes\nfile: '*.xlsx'\nsheet: Passes\ntext: 'The {Pass} pass.'\n")
    (tmp_path / "b.yml").write_text("templates:\n  - text: '{Name} is {Age}.'\n  - text: '{Name} lives in {Town}.'\n")
    (tmp_path / "notes.txt").write_text("not a template")
    reg = load_templates(tmp_path)
    assert [t.name for t in reg.templates] == ["passes", "b-1", "b-2"]
    assert reg.match("p.xlsx", "p.xlsx", "Passes", ["Pass", "State"])[0].name == "passes"
    assert reg.match("p.xlsx", "p.xlsx", "People", ["Name", "Town"])[0].name == "b-2"  # first that finds its columns
    assert reg.match("p.xlsx", "p.xlsx", "People", ["Town"]) is None
    (tmp_path / "c.yaml").write_text("text: '{A' \n")
    with pytest.raises(ValueError, match=r"template file .*c\.yaml, template 1: stray"):
        load_templates(tmp_path)


def test_shipped_templates_load_and_fit_their_sheets():
    reg = load_templates(REPO / "configs" / "templates")
    mtcars = ["mpg", "cyl", "disp", "hp", "drat", "wt", "qsec", "vs", "am", "gear", "carb"]
    assert reg.match("datasets.xlsx", "readxl/datasets.xlsx", "mtcars", mtcars)[0].name == "mtcars"
    assert reg.match("datasets.xlsx", "datasets.xlsx", "chickwts", ["weight", "feed"])[0].name == "chickwts"
    assert reg.match("other.xlsx", "other.xlsx", "mtcars", mtcars) is None


def test_fallback_names_every_value():
    assert render_fallback(["Team", "Column B", "Cups"], ["Blues", "", "1"]) == "Team: Blues; Cups: 1"


def test_excel_stage_uses_a_template_and_tags_it(tmp_path):
    book = tmp_path / "passes.xlsx"
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "Passes"
    for r in (["Mountain passes of the Sierra Nevada"], ["Pass", "State", "Connects", "Elevation"],
              ["Tioga", "California", "Yosemite Valley and Mono Lake", 3031],
              ["Sonora", "California", None, 2933], [None, "Nevada", "Reno and Truckee", 2200]):
        ws.append(r)
    for ref in ("D3", "D4", "D5"):
        ws[ref].number_format = '#,##0 "m"'
    wb.save(book)
    templates = tmp_path / "templates"
    templates.mkdir()
    (templates / "passes.yaml").write_text(
        "name: sierra-passes\nfile: 'passes*.xlsx'\nsheet: Passes\n"
        f"text: '{PASSES}'\naliases:\n  Altitude: [Elevation]\n")
    work = {"doc_id": "d", "collection": "t", "source_path": "passes.xlsx", "abs_path": str(book),
            "source_type": "excel", "content_sha256": "s", "pipeline_fingerprint": "fp", "run_id": "r"}
    rows = excel_to_chunks([work], excel=ExcelConfig(templates_dir=templates), quality=QualityConfig(),
                           embedding_model=MODEL)
    assert [(r["text"], r["tags"]) for r in rows] == [
        ("The Tioga pass is in California, connecting Yosemite Valley and Mono Lake, at 3,031 m.",
         ["row", "template:sierra-passes"]),
        ("The Sonora pass is in California, at 2,933 m.", ["row", "template:sierra-passes"]),
        # no pass name: the required field is empty, so this row reads as `Header: value`
        ("State: Nevada; Connects: Reno and Truckee; Elevation: 2,200 m", ["row", "template:fallback"]),
    ]
    assert rows[0]["heading_path"] == ["passes.xlsx", "Passes", "Mountain passes of the Sierra Nevada"]
    assert rows[0]["embed_text"] == ("passes.xlsx › Passes › Mountain passes of the Sierra Nevada\n\n"
                                     "The Tioga pass is in California, connecting Yosemite Valley and Mono Lake, at 3,031 m.")


def test_fallback_reads_cells_under_one_merged_label_as_one_value_when_one_is_text():
    labels = ["Period", "Period", "Public", "Public"]
    assert render_fallback(labels, ["1998", "Q1", "4.4", "5.0"], [False, True, False, False]) == (
        "Period: 1998 Q1; Public: 4.4; Public: 5.0")
    assert render_fallback(labels, ["1998", "Q1", "4.4", "5.0"]) == "Period: 1998; Period: Q1; Public: 4.4; Public: 5.0"
