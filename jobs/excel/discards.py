"""The run's discard report: every omitted Excel row, with its rule and reason.

Omitted rows are stored with the kept ones (`omitted`, `omit_reason`); qa/excel_discarded.parquet
and .csv list them apart, so a person can check what the row filters (jobs.excel.filters) and the
quality bands left out without reading the chunk parts. Written after the job, from those parts.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

__all__ = ["write_discard_report"]

_REPORT_COLUMNS = ["file", "sheet", "row", "rule", "reason", "text"]


def write_discard_report(run_dir: Path) -> dict[str, Path]:
    """qa/excel_discarded.parquet and .csv: every omitted Excel row of the run with its rule and reason.
    Reads the named chunk parts only: a run killed mid-write can leave a `.parquet.tmp` behind."""
    run_dir = Path(run_dir)
    wanted = ["source_path", "source_type", "sheet", "row", "omitted", "omit_reason", "text"]
    records = []
    for part in sorted((run_dir / "chunks").glob("part-*.parquet")):
        for r in pq.read_table(part, columns=wanted).to_pylist():
            if r["source_type"] == "excel" and r["omitted"]:
                rule, _, reason = (r["omit_reason"] or "").partition(":")
                records.append({"file": r["source_path"], "sheet": r["sheet"], "row": r["row"], "rule": rule.strip(),
                                "reason": reason.strip(), "text": r["text"]})
    records.sort(key=lambda r: (r["file"] or "", r["sheet"] or "", r["row"] or 0))
    schema = pa.schema([("file", pa.string()), ("sheet", pa.string()), ("row", pa.int64()), ("rule", pa.string()),
                        ("reason", pa.string()), ("text", pa.large_string())])
    qa = run_dir / "qa"
    qa.mkdir(parents=True, exist_ok=True)
    parquet_path, csv_path = qa / "excel_discarded.parquet", qa / "excel_discarded.csv"
    pq.write_table(pa.Table.from_pylist(records, schema=schema), parquet_path)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=_REPORT_COLUMNS)
    writer.writeheader()
    writer.writerows(records)
    csv_path.write_text(buf.getvalue(), encoding="utf-8")
    return {"excel_discarded.parquet": parquet_path, "excel_discarded.csv": csv_path}
