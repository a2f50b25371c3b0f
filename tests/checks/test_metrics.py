from jobs.checks.metrics import files_line


def test_the_files_line_tells_new_failures_from_files_that_failed_before():
    f = {"add": 1, "update": 0, "retry": 2, "skip": 5, "delete": 0, "failed": 1}
    assert files_line(f) == "1 added, 0 updated, 2 retried, 5 skipped, 0 deleted, 1 failed"
    assert files_line(f | {"failed_before": 0}) == files_line(f)
    assert files_line(f | {"failed_before": 3}) == ("1 added, 0 updated, 2 retried, 5 skipped, 0 deleted, 1 failed (new), "
                                                    "3 failed before (not retried; --retry-failed)")


def test_the_summary_says_how_many_formula_cells_read_as_empty(tmp_path):
    from jobs.checks.metrics import write_summary

    files = {"add": 1, "update": 0, "retry": 0, "skip": 0, "delete": 0, "failed": 0}
    chunks = {"total": 3, "embedded": 3, "omitted": 0, "by_quality": {}, "omitted_by_reason": {}}
    metrics = {"files": files, "chunks": chunks, "embedded_chunks": {"tokens_mean": 9, "tokens_median": 9},
               "seconds": 1.0, "failures": [], "text_changes": {"excel_formulas_without_value": 2}}
    write_summary(tmp_path / "s.md", metrics)
    assert "- 2 Excel formula cells saved without their values read as empty" in (tmp_path / "s.md").read_text()
    write_summary(tmp_path / "t.md", metrics | {"text_changes": {}})
    assert "formula" not in (tmp_path / "t.md").read_text()
