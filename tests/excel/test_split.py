"""jobs.excel.split: a row too long to embed is cut into parts that each stand alone and fit."""

from jobs.embed.tokens import token_counter
from tests.excel.conftest import MODEL, book, chunks


def _wide(tmp_path, groups: int):
    # US Census state finances' shape: each state a merged group over `State & local | State | Local`.
    top = ["Description"] + [x for g in range(groups) for x in (f"State {g}", None, None)]
    sub = [None] + ["State & local", "State", "Local"] * groups
    rows = [top, sub] + [[f"Line item {n}"] + [1_000_000 + 1234 * n * k for k in range(3 * groups)]
                         for n in range(1, 4)]
    path = book(tmp_path / "wide.xlsx", {"Table 1": rows})
    import openpyxl
    wb = openpyxl.load_workbook(path)
    ws = wb["Table 1"]
    for g in range(groups):
        ws.merge_cells(start_row=1, start_column=2 + 3 * g, end_row=1, end_column=4 + 3 * g)
    wb.save(path)
    return path


def test_a_row_past_the_window_is_cut_between_groups_and_each_part_names_its_row(tmp_path, plain):
    rows = chunks(_wide(tmp_path, 12), plain)
    limit = token_counter(MODEL).limit
    first = [r for r in rows if r["row"] == 3]
    assert len(first) >= 2 and all(r["omit_reason"] is None and r["token_count"] <= limit for r in first)
    assert [r["tags"][-1] for r in first] == [f"part:{k}/{len(first)}" for k in range(1, len(first) + 1)]
    assert all(r["text"].startswith("Description: Line item 1; ") for r in first)
    # Whole groups: no state's three columns are spread over two parts.
    for r in first:
        states = {f.split(" › ")[0] for f in r["text"].split("; ")[1:]}
        assert all(r["text"].count(f"{s} › ") == 3 for s in states)
    assert len({r["chunk_id"] for r in rows}) == len(rows)  # each part its own chunk


def test_a_row_within_the_window_is_one_chunk(tmp_path, plain):
    rows = chunks(_wide(tmp_path, 2), plain)
    assert [r["row"] for r in rows] == [3, 4, 5] and not any(t.startswith("part:") for r in rows for t in r["tags"])


def test_years_head_the_groups_of_a_table_without_parent_labels(tmp_path, plain):
    # Kindergarten vaccination coverage's shape: `2009-10 | SURVEY TYPE | TARGET` repeated per year.
    head = ["State"] + [x for y in range(2000, 2016) for x in (f"{y}-{str(y + 1)[2:]}", "SURVEY TYPE", "TARGET")]
    row = ["Alabama"] + [x for y in range(2000, 2016) for x in (94.0, "Census survey of every school", 95.0)]
    rows = chunks(book(tmp_path / "vacc.xlsx", {"Sheet1": [head, row, row]}), plain)
    parts = [r for r in rows if r["row"] == 2]
    assert len(parts) >= 2
    for r in parts:
        fields = r["text"].split("; ")
        assert fields[0] == "State: Alabama" and fields[1].split(":")[0].endswith(("-01", "-02", "-03", "-04", "-05",
                                                                                      "-06", "-07", "-08", "-09", "-10",
                                                                                      "-11", "-12", "-13", "-14", "-15",
                                                                                      "-16"))


def test_a_parent_all_of_a_parts_fields_share_goes_into_its_breadcrumb(tmp_path, plain):
    # Kindergarten vaccination coverage: each vaccine merged over its years' columns, a line repeating
    # `All kindergartners` under it, then `2009-10 | SURVEY TYPE | TARGET` per year.
    vaccines, years = ["MMR Vaccination", "Polio Vaccination"], range(2000, 2012)
    width = 3 * len(years)
    top = ["Names"] + [x for v in vaccines for x in [v] + [None] * (width - 1)]
    mid = [None] + [x for v in vaccines for x in ["All kindergartners"] + [None] * (width - 1)]
    head = [None] + [x for _ in vaccines for y in years for x in (f"{y}-{str(y + 1)[2:]}", "SURVEY TYPE", "TARGET")]
    row = ["Alabama"] + [x for _ in vaccines for _ in years for x in (94.0, "Census of every school", 95.0)]
    path = book(tmp_path / "vacc.xlsx", {"Coverage": [top, mid, head, row, row]})
    import openpyxl
    wb = openpyxl.load_workbook(path)
    ws = wb["Coverage"]
    for line in (1, 2):
        for k in range(len(vaccines)):
            ws.merge_cells(start_row=line, start_column=2 + k * width, end_row=line, end_column=1 + (k + 1) * width)
    wb.save(path)
    parts = [r for r in chunks(path, plain) if r["row"] == 4]
    assert len(parts) >= 2 and all(r["token_count"] <= token_counter(MODEL).limit for r in parts)
    first = parts[0]
    assert first["heading_path"][-2:] == ["MMR Vaccination", "All kindergartners"]
    assert first["text"].startswith("Names: Alabama; 2000-01: 94; SURVEY TYPE: Census of every school; TARGET: 95;")
    assert parts[-1]["heading_path"][-2:] == ["Polio Vaccination", "All kindergartners"]
    assert first["breadcrumb"].endswith("MMR Vaccination › All kindergartners")
