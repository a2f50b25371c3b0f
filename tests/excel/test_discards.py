"""jobs.excel.discards: the run's report of every omitted Excel row, with its rule and reason."""

import csv

import pyarrow.parquet as pq

from jobs.excel.discards import write_discard_report
from jobs.store.parquet import RunOutput
from tests.excel.conftest import book, chunks
from tests.excel.test_filters import FILTER_ROWS


def test_discard_report_lists_omitted_rows_with_rule_and_reason(tmp_path, plain):
    rows = chunks(book(tmp_path / "filters.xlsx", {"Parts": FILTER_ROWS}), plain)
    run_dir = tmp_path / "run"
    RunOutput(run_dir, 384).write_part(rows)
    (run_dir / "chunks" / "part-00001.parquet.tmp").write_bytes(b"torn")  # a killed writer's leftover is ignored
    paths = write_discard_report(run_dir)
    assert paths == {"excel_discarded.parquet": run_dir / "qa" / "excel_discarded.parquet",
                     "excel_discarded.csv": run_dir / "qa" / "excel_discarded.csv"}
    table = pq.read_table(paths["excel_discarded.parquet"]).to_pylist()
    assert [(r["row"], r["rule"]) for r in table] == [(3, "min_fields"), (4, "structural"), (5, "structural"),
                                                      (6, "min_words"), (8, "max_words"), (9, "structural"),
                                                      (10, "min_words")]
    first = table[0]
    assert first == {"file": "filters.xlsx", "sheet": "Parts", "row": 3, "rule": "min_fields",
                     "reason": "1 non-empty cell(s), fewer than excel.min_fields=2", "text": "Item: Widget"}
    with open(paths["excel_discarded.csv"], newline="", encoding="utf-8") as fh:
        assert list(csv.DictReader(fh)) == [{k: str(v) for k, v in r.items()} for r in table]


def test_discard_report_of_a_run_without_excel_rows(tmp_path):
    paths = write_discard_report(tmp_path)
    assert pq.read_table(paths["excel_discarded.parquet"]).num_rows == 0
    assert paths["excel_discarded.csv"].read_text().strip() == "file,sheet,row,rule,reason,text"
