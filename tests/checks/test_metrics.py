from jobs.checks.metrics import files_line


def test_the_files_line_tells_new_failures_from_files_that_failed_before():
    f = {"add": 1, "update": 0, "retry": 2, "skip": 5, "delete": 0, "failed": 1}
    assert files_line(f) == "1 added, 0 updated, 2 retried, 5 skipped, 0 deleted, 1 failed"
    assert files_line(f | {"failed_before": 0}) == files_line(f)
    assert files_line(f | {"failed_before": 3}) == ("1 added, 0 updated, 2 retried, 5 skipped, 0 deleted, 1 failed (new), "
                                                    "3 failed before (not retried; --retry-failed)")
