import pytest

from jobs.sources.manifest import freeze, load_manifest, snapshot

INC, EXC = ["**/*.md"], ["**/.*"]


def test_freeze_then_snapshot_reports_changed_and_missing(tmp_path):
    root = tmp_path / "notes"
    root.mkdir()
    for name in ("a.md", "b.md", "c.md"):
        (root / name).write_text(f"# {name}\n\ntext of {name}\n")
    manifest = freeze([root], INC, EXC, "v1", tmp_path / "m.json")
    assert [f["source_path"] for f in manifest["files"]] == ["a.md", "b.md", "c.md"]
    assert load_manifest(tmp_path / "m.json")["tag"] == "v1"

    (root / "b.md").write_text("# b\n\nchanged after the freeze\n")
    (root / "c.md").unlink()
    (root / "d.md").write_text("# d\n\nnew after the freeze\n")
    snap = snapshot(load_manifest(tmp_path / "m.json"), [root], INC, EXC)
    assert [f.source_path for f in snap.files] == ["a.md"]
    assert snap.changed == ["b.md"] and snap.missing == ["c.md"]


def test_not_a_manifest_is_a_clear_error(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text('{"hello": 1}')
    with pytest.raises(ValueError, match="not a corpusmill manifest"):
        load_manifest(bad)
