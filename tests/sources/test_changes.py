from pathlib import Path

from jobs.sources.changes import StoredDoc, make_plan
from jobs.sources.discover import discover, sha256_file


def _tree(tmp_path: Path) -> Path:
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.md").write_text("# A\n\nalpha text")
    (tmp_path / "sub" / "b.md").write_text("# B\n\nbeta text")
    (tmp_path / "sub" / "notes.txt").write_text("not matched")
    (tmp_path / ".hidden.md").write_text("# hidden")
    return tmp_path


def test_discover_hashes_matching_files_with_relative_paths(tmp_path):
    root = _tree(tmp_path)
    files = discover([root], ["**/*.md"], ["**/.*"])
    assert [f.source_path for f in files] == ["a.md", "sub/b.md"]
    assert files[0].content_sha256 == sha256_file(root / "a.md")
    assert files[0].source_type == "markdown"


def test_discover_refuses_same_relative_path_under_two_roots(tmp_path):
    r1, r2 = tmp_path / "r1", tmp_path / "r2"
    for r in (r1, r2):
        r.mkdir()
        (r / "same.md").write_text("x")
    try:
        discover([r1, r2], ["**/*.md"], [])
    except ValueError as exc:
        assert "same.md" in str(exc)
    else:
        raise AssertionError("expected a collision error")


def test_discover_missing_root_is_a_clear_error(tmp_path):
    try:
        discover([tmp_path / "nope"], ["**/*.md"], [])
    except FileNotFoundError as exc:
        assert "nope" in str(exc)
    else:
        raise AssertionError


def test_plan_classifies_add_update_retry_skip_delete(tmp_path):
    root = _tree(tmp_path)
    files = {f.source_path: f for f in discover([root], ["**/*.md"], ["**/.*"])}
    stored = {
        "a.md": StoredDoc("a.md", files["a.md"].content_sha256, "fp1", "done"),
        "sub/b.md": StoredDoc("sub/b.md", "old-sha", "fp1", "done"),
        "gone.md": StoredDoc("gone.md", "x", "fp1", "done"),
    }
    plan = make_plan(list(files.values()), stored, "fp1")
    assert plan.unchanged == 1 and plan.relisted == [files["a.md"]]  # counted; kept only when read
    assert [f.source_path for f in plan.update] == ["sub/b.md"]
    assert plan.delete == ["gone.md"]
    assert plan.counts() == {"add": 0, "update": 1, "retry": 0, "skip": 1, "delete": 1, "failed_before": 0}


def test_plan_fingerprint_change_updates_everything_and_failed_is_retried(tmp_path):
    root = _tree(tmp_path)
    files = discover([root], ["**/*.md"], ["**/.*"])
    stored = {f.source_path: StoredDoc(f.source_path, f.content_sha256, "fp1", "done") for f in files}
    assert len(make_plan(files, stored, "fp2").update) == 2
    stored["a.md"] = StoredDoc("a.md", files[0].content_sha256, "fp1", "failed")
    plan = make_plan(files, stored, "fp1")
    assert [f.source_path for f in plan.retry] == ["a.md"]


def test_plan_keep_removed_keeps_documents(tmp_path):
    stored = {"gone.md": StoredDoc("gone.md", "x", "fp", "done")}
    assert make_plan([], stored, "fp", keep_removed=True).delete == []
    assert make_plan([], stored, "fp").delete == ["gone.md"]


def test_a_file_that_failed_on_its_content_stays_failed_until_it_changes_or_is_asked_for(tmp_path):
    root = _tree(tmp_path)
    files = discover([root], ["**/*.md"], ["**/.*"])
    a, b = files

    def failed(f, sha, fingerprint="fp1"):  # failed on content `sha` under `fingerprint`
        return StoredDoc(f.source_path, None, None, "failed", failed_sha256=sha, failed_fingerprint=fingerprint)

    stored = {"a.md": failed(a, a.content_sha256), "sub/b.md": failed(b, "older-content")}
    plan = make_plan(files, stored, "fp1")
    assert [f.source_path for f in plan.retry] == ["sub/b.md"]  # b changed since it failed
    assert plan.counts() == {"add": 0, "update": 0, "retry": 1, "skip": 0, "delete": 0, "failed_before": 1}
    assert [f.source_path for f in make_plan(files, stored, "fp2").retry] == ["a.md", "sub/b.md"]  # a new pipeline
    retried = make_plan(files, stored, "fp1", retry_failed=True)
    assert [f.source_path for f in retried.retry] == ["a.md", "sub/b.md"] and retried.failed_before == 0
    # A failure that says nothing about the content (a worker lost, the network) records no content: retried.
    stored["a.md"] = failed(a, None, None)
    assert [f.source_path for f in make_plan(files, stored, "fp1").retry] == ["a.md", "sub/b.md"]
