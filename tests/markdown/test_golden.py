"""Golden chunk outputs for real files (tests/data/golden/*.md → *.chunks.json), and the rule that
ties them to `jobs.PIPELINE_VERSION`.

A chunking change that alters any of them fails here; when the change is intended, bump
PIPELINE_VERSION in jobs/__init__.py (so an upgrade re-chunks stored corpora: the version is part of
the pipeline fingerprint), regenerate on purpose with `CORPUSMILL_UPDATE_GOLDEN=1 make test-fast`
and review the diff before committing.

tests/data/golden/VERSION.json records the PIPELINE_VERSION the goldens were made under and a
sha256 over all *.chunks.json (per file too). The goldens changing under the recorded version fails
("goldens changed without a PIPELINE_VERSION bump"), and so does a bumped version that was not
re-recorded. With CORPUSMILL_UPDATE_GOLDEN=1 the goldens and VERSION.json are rewritten, except that
a changed golden under an unchanged version is refused: the goldens are rewritten (to review the
diff), VERSION.json is not, and the test fails until the version is bumped and the update rerun.
New golden files need no bump; the update records them.
"""

import hashlib
import json
import os

import pytest

from jobs import PIPELINE_VERSION
from tests.conftest import REPO
from tests.markdown.test_windows import chunk_text

GOLDEN = REPO / "tests" / "data" / "golden"
VERSION_FILE = GOLDEN / "VERSION.json"
FIELDS = ["seq", "heading_path", "tags", "quality", "omitted", "char_start", "char_end", "token_count", "text", "embed_text"]
BUMP = ("bump jobs/__init__.py PIPELINE_VERSION and rerun with CORPUSMILL_UPDATE_GOLDEN=1")


def updating() -> bool:
    return bool(os.environ.get("CORPUSMILL_UPDATE_GOLDEN"))


@pytest.mark.parametrize("source", sorted(GOLDEN.glob("*.md")), ids=lambda p: p.name)
def test_golden_chunks(source):
    rows = chunk_text(source.read_text(encoding="utf-8"), name=source.name)
    got = [{k: r[k] for k in FIELDS} for r in rows]
    expected_path = source.with_suffix(".chunks.json")
    if updating() or not expected_path.exists():
        expected_path.write_text(json.dumps(got, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        if not updating():
            pytest.fail(f"wrote a new golden file {expected_path.name}; review and commit it")
    assert got == json.loads(expected_path.read_text(encoding="utf-8"))


def golden_digests() -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(GOLDEN.glob("*.chunks.json"))}


def overall_digest(files: dict[str, str]) -> str:
    """sha256 over the goldens' names and contents, in name order."""
    h = hashlib.sha256()
    for name, digest in sorted(files.items()):
        h.update(f"{name}\0{digest}\n".encode())
    return h.hexdigest()


def version_problem(recorded: dict | None, files: dict[str, str], version: str) -> str | None:
    """Why the goldens on disk and VERSION.json (`recorded`) disagree under `version`, or None.
    New golden files are not a problem here (the update records them), changed or removed ones are."""
    if recorded is None:
        return f"{VERSION_FILE.name} is missing: rerun with CORPUSMILL_UPDATE_GOLDEN=1 to record it"
    if recorded.get("pipeline_version") != version:
        return None  # a bump: whatever changed is allowed, once re-recorded
    if recorded.get("goldens_sha256") == overall_digest(files):
        return None
    before = recorded.get("files") or {}
    changed = sorted(n for n in before if files.get(n) != before[n])
    if not changed and before and set(before) <= set(files):
        return None  # only new golden files
    return (f"goldens changed without a PIPELINE_VERSION bump ({', '.join(changed) or 'digest differs'}; "
            f"PIPELINE_VERSION is still {version!r}): {BUMP}")


def read_recorded() -> dict | None:
    return json.loads(VERSION_FILE.read_text(encoding="utf-8")) if VERSION_FILE.exists() else None


def test_goldens_are_recorded_under_pipeline_version():
    """Runs after test_golden_chunks (definition order), so an update sees the rewritten goldens."""
    files = golden_digests()
    recorded = read_recorded()
    problem = version_problem(recorded, files, PIPELINE_VERSION)
    if updating():
        if problem and recorded is not None:
            pytest.fail(f"refusing to record the changed goldens in {VERSION_FILE.name}: {problem}")
        VERSION_FILE.write_text(json.dumps({"pipeline_version": PIPELINE_VERSION, "goldens_sha256": overall_digest(files),
                                            "files": files}, indent=1) + "\n", encoding="utf-8")
        return
    if problem:
        pytest.fail(problem)
    if recorded["pipeline_version"] != PIPELINE_VERSION:
        pytest.fail(f"PIPELINE_VERSION is {PIPELINE_VERSION!r} but the goldens were recorded under "
                    f"{recorded['pipeline_version']!r}: rerun with CORPUSMILL_UPDATE_GOLDEN=1 to re-record "
                    f"{VERSION_FILE.name} (and review the golden diff)")
    if recorded["goldens_sha256"] != overall_digest(files):
        pytest.fail(f"new golden file(s) {sorted(set(files) - set(recorded.get('files') or {}))} are not recorded "
                    f"in {VERSION_FILE.name}: rerun with CORPUSMILL_UPDATE_GOLDEN=1")


@pytest.mark.parametrize("case, recorded, files, version, expected", [
    ("unchanged", {"pipeline_version": "2", "files": {"a": "1"}}, {"a": "1"}, "2", None),
    ("changed, no bump", {"pipeline_version": "2", "files": {"a": "1"}}, {"a": "9"}, "2",
     "without a PIPELINE_VERSION bump (a;"),
    ("removed, no bump", {"pipeline_version": "2", "files": {"a": "1", "b": "2"}}, {"a": "1"}, "2", "bump (b;"),
    ("changed, bumped", {"pipeline_version": "2", "files": {"a": "1"}}, {"a": "9"}, "3", None),
    ("new file only", {"pipeline_version": "2", "files": {"a": "1"}}, {"a": "1", "b": "2"}, "2", None),
    ("no record", None, {"a": "1"}, "2", "is missing"),
])
def test_version_rule(case, recorded, files, version, expected):
    if recorded is not None and "goldens_sha256" not in recorded:
        recorded["goldens_sha256"] = overall_digest(recorded["files"])
    problem = version_problem(recorded, files, version)
    assert (problem is None) if expected is None else (expected in problem), problem
