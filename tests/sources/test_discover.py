"""jobs/sources/discover.py and listing._iter_local with symbolic links: what is followed, what is skipped and why.

The trees are built by each test in its own tmp dir (symlinks committed to git do not survive every
checkout), with real links, a real FIFO and real loops: nothing is faked.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import ClassVar

import pytest

from jobs.sources.changes import make_plan
from jobs.sources.discover import discover
from jobs.sources.listing import Skipped, iter_files
from jobs.sources.manifest import freeze, load_manifest, snapshot
from tests.conftest import run_cli

INC, EXC = ["**/*.md"], ["**/.*", "**/.*/**"]


@pytest.fixture()
def tree(tmp_path) -> tuple[Path, Path]:
    """(root, outside): a corpus whose links point out of it, in it, back up it and nowhere."""
    outside = tmp_path / "outside"
    (outside / "dir").mkdir(parents=True)
    (outside / "secret.md").write_text("# Secret\n\nthe text of a file outside the corpus\n")
    (outside / "dir" / "c.md").write_text("# C\n\noutside directory text\n")
    root = tmp_path / "corpus"
    (root / "docs").mkdir(parents=True)
    (root / "loop").mkdir()
    (root / "a.md").write_text("# A\n\nalpha\n")
    (root / "docs" / "b.md").write_text("# B\n\nbeta\n")
    (root / "loop" / "x.md").write_text("# X\n\nin the loop\n")
    os.symlink(outside / "secret.md", root / "leak.md")  # a file link out of the root
    os.symlink(outside / "dir", root / "extdir")  # a directory link out of the root
    os.symlink("..", root / "loop" / "up")  # a directory linking to its parent: a loop
    os.symlink("docs/b.md", root / "alias.md")  # a file link inside the root
    os.symlink("docs", root / "docslink")  # a directory link inside the root
    os.symlink("nowhere.md", root / "broken.md")  # a broken link
    os.symlink("self.md", root / "self.md")  # a link to itself (ELOOP)
    os.mkfifo(root / "pipe.md")  # opening it to hash would block for ever
    (root / ".git").mkdir()
    os.symlink("gone", root / ".git" / "stale.md")  # broken, but excluded: not worth a warning
    return root, outside


def _skipped(found) -> dict[str, str]:
    return {s["path"]: s["reason"] for s in found.skipped}


def test_links_out_of_the_root_loops_and_broken_links_are_skipped_and_reported(tree, caplog):
    root, outside = tree
    with caplog.at_level(logging.WARNING, logger="jobs.sources.discover"):
        found = discover([root], INC, EXC)
    by_path = {f.source_path: f for f in found}
    # Inside links are followed and listed under their own path; the directory loop ends after one level.
    assert sorted(by_path) == ["a.md", "alias.md", "docs/b.md", "docslink/b.md", "loop/x.md"]
    assert by_path["alias.md"].abs_path == str((root / "docs" / "b.md").resolve())  # what is read is the target
    assert by_path["alias.md"].content_sha256 == by_path["docs/b.md"].content_sha256
    assert _skipped(found) == {"leak.md": "link_outside_root", "extdir": "link_outside_root",
                               "loop/up": "link_loop", "broken.md": "broken_link", "self.md": "link_loop",
                               "pipe.md": "not_a_file"}
    entry = next(s for s in found.skipped if s["path"] == "leak.md")
    assert entry == {"root": str(root), "path": "leak.md", "reason": "link_outside_root",
                     "target": str((outside / "secret.md").resolve())}
    assert next(s for s in found.skipped if s["path"] == "broken.md")["target"] == "nowhere.md"
    # Nothing outside the root was read, and every skip was logged.
    assert not any(str(outside.resolve()) in f.abs_path for f in found)
    warned = " ".join(r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    for path in _skipped(found):
        assert path in warned
    assert "stale.md" not in warned


def test_follow_external_links_opts_in_and_loops_out_there_still_end(tree):
    root, outside = tree
    os.symlink(root, outside / "dir" / "back")  # the outside directory links back to the corpus
    found = discover([root], INC, EXC, follow_external_links=True)
    paths = sorted(f.source_path for f in found)
    assert "leak.md" in paths and "extdir/c.md" in paths
    assert next(f for f in found if f.source_path == "leak.md").abs_path == str((outside / "secret.md").resolve())
    skipped = _skipped(found)
    assert skipped["extdir/back"] == "link_loop" and skipped["loop/up"] == "link_loop"
    assert "leak.md" not in skipped and "extdir" not in skipped


def test_iter_files_streams_the_same_way_for_file_uris(tree):
    root, _ = tree
    seen: list[Skipped] = []
    items = list(iter_files(f"file://{root}", on_skip=seen.append))
    assert "leak.md" not in {i.rel for i in items}
    assert {s.rel for s in seen} >= {"leak.md", "extdir", "loop/up", "broken.md"}
    assert [i.rel for i in items] == sorted(i.rel for i in items if "/" not in i.rel) + [
        i.rel for i in items if "/" in i.rel]  # a directory's files come before its subdirectories


def test_a_cycle_between_two_directories_terminates(tmp_path):
    root = tmp_path / "r"
    (root / "a").mkdir(parents=True)
    (root / "b").mkdir()
    (root / "a" / "one.md").write_text("one")
    (root / "b" / "two.md").write_text("two")
    os.symlink("../b", root / "a" / "to_b")
    os.symlink("../a", root / "b" / "to_a")
    found = discover([root], INC, EXC)
    assert sorted(f.source_path for f in found) == ["a/one.md", "a/to_b/two.md", "b/to_a/one.md", "b/two.md"]
    assert _skipped(found) == {"a/to_b/to_a": "link_loop", "b/to_a/to_b": "link_loop"}


def test_the_plan_and_a_snapshot_carry_what_was_skipped(tree, tmp_path):
    root, _ = tree
    files = discover([root], INC, EXC)
    plan = make_plan(files, {}, "fp")
    assert {s["path"] for s in plan.skipped_links} == set(_skipped(files))
    summary = plan.discovery()
    assert summary["skipped"] == 6 and summary["skipped_by_reason"] == {
        "broken_link": 1, "link_loop": 2, "link_outside_root": 2, "not_a_file": 1}
    assert "skipped_links" not in plan.counts()  # counts stay the files acted on
    assert make_plan(list(files), {}, "fp").skipped_links == []  # a plain list carries nothing

    freeze([root], INC, EXC, "v1", tmp_path / "m.json")
    snap = snapshot(load_manifest(tmp_path / "m.json"), [root], INC, EXC)
    assert {s["path"] for s in make_plan(snap.files, {}, "fp").skipped_links} == set(_skipped(files))


def test_the_qa_report_lists_what_discovery_skipped(tree, tmp_path):
    from jobs.tools.report import write_report

    root, _ = tree
    plan = make_plan(discover([root], INC, EXC), {}, "fp")
    run = tmp_path / "run"
    (run / "qa").mkdir(parents=True)
    (run / "qa" / "metrics.json").write_text(json.dumps({"discovery": plan.discovery()}))
    page = write_report(run)["report.html"].read_text()
    assert "Skipped in discovery (6)" in page
    assert "leak.md" in page and "link_outside_root" in page and "broken_link 1" in page

    (run / "qa" / "metrics.json").write_text(json.dumps({"discovery": make_plan([], {}, "fp").discovery()}))
    assert "Nothing was skipped." in write_report(run)["report.html"].read_text()


@pytest.mark.slow
def test_corpusmill_plan_shows_skipped_links(tree, tmp_path, pg_url, cm_home):
    root, _ = tree
    base = ["plan", "--input", str(root), "--collection", "links_plan", "--database-url", pg_url]
    out = run_cli(*base, "--json")
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    assert {s["path"]: s["reason"] for s in plan["skipped_links"]}["leak.md"] == "link_outside_root"
    assert "leak.md" not in plan["files"]["add"]
    text = run_cli(*base)
    assert text.returncode == 0, text.stderr
    assert "6 link(s) not followed" in text.stdout
    assert "skip   leak.md (link_outside_root ->" in text.stdout


def test_only_what_could_have_held_a_document_is_reported(tmp_path):
    root = tmp_path / "r"
    (root / "venv" / "bin").mkdir(parents=True)
    (root / "notes.md").write_text("# N\n\nnotes\n")
    os.symlink(sys.executable, root / "venv" / "bin" / "python")  # outside, but never a document
    os.symlink(tmp_path, root / "venv" / "outside_dir")  # a directory: it could hold documents
    os.symlink("gone.txt", root / "gone.txt")  # broken, and no glob selects it
    found = discover([root], INC, EXC)
    assert [f.source_path for f in found] == ["notes.md"]
    assert _skipped(found) == {"venv/outside_dir": "link_outside_root"}


def test_links_fanning_out_over_the_same_directories_are_walked_once_each(tmp_path):
    # Ten links to b, each of whose ten links lead to c: followed naively, 100 copies of c/x.md (and
    # 10^k for k such levels). Each directory is walked through one link only.
    root = tmp_path / "corpus"
    for d in ("a", "b", "c"):
        (root / d).mkdir(parents=True)
    (root / "c" / "x.md").write_text("# X\n\nthe one file\n")
    for i in range(10):
        os.symlink("../b", root / "a" / f"l{i}")
        os.symlink("../c", root / "b" / f"m{i}")
    found = discover([root], INC, EXC)
    paths = sorted(f.source_path for f in found)
    # Depth first: a/l0 walks b, whose m0 walks c; every other link to b or c is a duplicate.
    assert paths == ["a/l0/m0/x.md", "c/x.md"]
    reasons = _skipped(found)
    assert {reasons[f"a/l{i}"] for i in range(1, 10)} == {"link_duplicate"}
    assert {reasons[f"b/m{i}"] for i in range(10)} | {reasons[f"a/l0/m{i}"] for i in range(1, 10)} == {"link_duplicate"}


def test_documents_under_a_directory_the_listing_could_not_open_are_not_deleted():
    from jobs.sources.changes import StoredDoc

    class Listed(list):
        skipped: ClassVar[list[dict]] = [{"root": "/r", "path": "team/private", "reason": "unreadable",
                                          "target": "/r/team/private (EIO)"}]

    stored = {p: StoredDoc(p, "sha", "fp", "done") for p in ("team/private/a.md", "team/public.md", "gone.md")}
    plan = make_plan(Listed(), stored, "fp")
    assert plan.delete == ["gone.md", "team/public.md"]  # absent and readable: deleted; unreadable: kept


def _default_globs() -> list[tuple[list[str], list[str]]]:
    """The include/exclude globs of a run given none: the config models' defaults and the shipped local.yaml's."""
    import yaml

    from jobs.config import InputConfig
    from jobs.defaults import default_config

    shipped = yaml.safe_load(default_config("local.yaml").read_text())["input"]
    return [(InputConfig().include, InputConfig().exclude), (shipped["include"], shipped["exclude"])]


def test_default_globs_take_extensions_in_any_case_and_legacy_xls_files(tmp_path):
    from tests.excel.conftest import UNSTRUCTURED

    root = tmp_path / "corpus"
    for rel in ["README.MD", "Data.XLSX", "notes.Markdown", "Sheet.CSV", "Macros.XlsM", "a.md", "x.TXT",
                "Old/.Draft.MD"]:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("# T\n\ntext\n")
    (root / "Old" / "budget.XLS").write_bytes((UNSTRUCTURED / "tests-example.xls").read_bytes())
    os.symlink("nowhere.md", root / "Broken.MD")
    for include, exclude in _default_globs():
        found = discover([root], include, exclude)
        assert {f.source_path: f.source_type for f in found} == {
            "Data.XLSX": "excel", "Macros.XlsM": "excel", "README.MD": "markdown", "Sheet.CSV": "excel", "a.md": "markdown",
            "notes.Markdown": "markdown", "Old/budget.XLS": "excel"}  # hidden files stay out, whatever their case
        assert _skipped(found) == {"Broken.MD": "broken_link"}

    include, exclude = _default_globs()[1]
    assert "Old/budget.XLS" not in {f.source_path for f in discover([root], include, [*exclude, "**/*.xls"])}
    assert [f.source_path for f in discover([root], ["**/*.md"], EXC)] == ["README.MD", "a.md"]  # no .xlsx asked for


def test_user_globs_match_without_regard_to_case(tmp_path):
    root = tmp_path / "corpus"
    for rel in ["Docs/Intro.MD", "docs/usage.md", "DOCS/Drafts/wip.md", "other/x.md"]:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("# T\n\ntext\n")
    found = discover([root], ["docs/**/*.md"], ["**/drafts/**"])
    assert sorted(f.source_path for f in found) == ["Docs/Intro.MD", "docs/usage.md"]
