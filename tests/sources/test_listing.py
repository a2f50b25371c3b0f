"""jobs/sources/listing.py: streaming listings, local and in a bucket, and what discovery and manifests make
of them across filesystems.

Object-store cases run against a real S3 protocol server on loopback (moto's server mode)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from jobs.sources.changes import StoredDoc
from jobs.sources.discover import discover
from jobs.sources.listing import iter_files
from jobs.sources.reads import READS
from tests.conftest import CORPUS, object_gets

INCLUDE = ["**/*.md", "**/*.xlsx", "**/*.csv"]
EXCLUDE = ["**/.*", "**/.*/**", "**/~$*"]


def put_tree(s3_server, bucket: str, prefix: str, root: Path) -> None:
    client = s3_server.client()
    for p in sorted(root.rglob("*")):
        if p.is_file():
            client.put_object(Bucket=bucket, Key=f"{prefix}/{p.relative_to(root).as_posix()}", Body=p.read_bytes())


# ---- listings -----------------------------------------------------------------------------------------

def test_local_listing_is_sorted_with_mtime_tags(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "x.md").write_text("x")
    (tmp_path / "a.md").write_text("aa")
    items = list(iter_files(tmp_path))
    assert [(i.rel, i.size) for i in items] == [("a.md", 2), ("b/x.md", 1)]
    assert all(i.tag.startswith("mtime:") for i in items)
    with pytest.raises(FileNotFoundError, match="not a directory"):
        list(iter_files(tmp_path / "missing"))


def test_s3_listing_streams_page_by_page_with_etags(s3_server, bucket, opts, monkeypatch):
    client = s3_server.client()
    for i in range(7):
        client.put_object(Bucket=bucket, Key=f"pre/d{i % 2}/n{i}.md", Body=b"x" * i)
    client.put_object(Bucket=bucket, Key="prefix2/other.md", Body=b"not under pre/")
    monkeypatch.setattr("jobs.sources.listing.PAGE", 3)
    with s3_server.record() as requests:
        it = iter_files(f"s3://{bucket}/pre/", opts)
        first = next(it)  # the first object arrives before the listing is complete
        rest = list(it)
    items = [first, *rest]
    assert [i.rel for i in items] == sorted(f"d{i % 2}/n{i}.md" for i in range(7))
    assert {i.rel: i.size for i in items}["d1/n5.md"] == 5
    assert all(i.tag.startswith("etag:") and '"' not in i.tag for i in items)
    assert items[0].uri == f"s3://{bucket}/pre/{items[0].rel}"
    assert object_gets(requests) == []  # listing only: no object body read
    with pytest.raises(FileNotFoundError, match="no objects"):
        list(iter_files(f"s3://{bucket}/nothing-here", opts))


# ---- discovery and manifests over local and object-store listings ------------------------------------

def test_globs_select_the_same_files_locally_and_in_a_bucket(s3_server, bucket, opts, tmp_path):
    tree = tmp_path / "tree"
    for rel in ["a.md", ".hidden.md", "sub/b.md", "sub/.git/c.md", "sub/deep/d.xlsx", "sub/~$lock.xlsx", "x.txt"]:
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_bytes(rel.encode())
    put_tree(s3_server, bucket, "tree", tree)
    local = discover([tree], INCLUDE, EXCLUDE)
    remote = discover([f"s3://{bucket}/tree"], INCLUDE, EXCLUDE, opts)
    assert [f.source_path for f in local] == [f.source_path for f in remote] == ["a.md", "sub/b.md", "sub/deep/d.xlsx"]
    assert [f.content_sha256 for f in local] == [f.content_sha256 for f in remote]
    shared = discover([f"file://{tree}"], INCLUDE, EXCLUDE)  # a mount every node has: read like a local path
    assert [(f.source_path, f.abs_path) for f in shared] == [(f.source_path, f.abs_path) for f in local]


def test_extensions_match_in_any_case_locally_and_in_a_bucket(s3_server, bucket, opts, tmp_path):
    tree = tmp_path / "cased"
    for rel in ["A.MD", "sub/B.Xlsx", "sub/C.CSV", "old/D.XLS", "e.TXT", ".F.MD"]:
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_bytes(rel.encode())
    put_tree(s3_server, bucket, "cased", tree)
    local = discover([tree], INCLUDE, EXCLUDE)
    remote = discover([f"s3://{bucket}/cased"], INCLUDE, EXCLUDE, opts)
    assert [(f.source_path, f.source_type) for f in local] == [(f.source_path, f.source_type) for f in remote] == [
        ("A.MD", "markdown"), ("sub/B.Xlsx", "excel"), ("sub/C.CSV", "excel")]  # INCLUDE takes no .xls


def test_discover_reads_only_what_the_listing_says_changed(s3_server, bucket, opts):
    put_tree(s3_server, bucket, "corpus", CORPUS)
    root = f"s3://{bucket}/corpus"
    first = discover([root], INCLUDE, EXCLUDE, opts)
    assert all(f.hashed for f in first) and len(first) == 7
    known = {f.source_path: StoredDoc(f.source_path, f.content_sha256, "fp", "done", f.size_bytes, f.listing_tag)
             for f in first}
    # One changed object; one document whose row is not `done` (its listing may describe content never loaded).
    s3_server.client().put_object(Bucket=bucket, Key="corpus/hugo/server.md", Body=b"# Server\n\nchanged")
    known["hugo/archetypes.md"] = StoredDoc(**{**known["hugo/archetypes.md"].__dict__, "status": "pending"})
    before = READS["objects"]
    with s3_server.record() as requests:
        again = discover([root], INCLUDE, EXCLUDE, opts, known)
    assert sorted(object_gets(requests)) == [f"/{bucket}/corpus/hugo/archetypes.md", f"/{bucket}/corpus/hugo/server.md"]
    assert READS["objects"] - before == 2
    by_path = {f.source_path: f for f in again}
    assert by_path["hugo/server.md"].content_sha256 == hashlib.sha256(b"# Server\n\nchanged").hexdigest()
    assert not by_path["workbooks/stanley-cups.xlsx"].hashed
    assert by_path["workbooks/stanley-cups.xlsx"].content_sha256 == known["workbooks/stanley-cups.xlsx"].content_sha256


def test_two_roots_with_the_same_relative_path_are_refused_across_filesystems(s3_server, bucket, opts, tmp_path):
    (tmp_path / "same.md").write_text("local")
    s3_server.client().put_object(Bucket=bucket, Key="r/same.md", Body=b"remote")
    with pytest.raises(ValueError, match="same.md exists under two input roots"):
        discover([tmp_path, f"s3://{bucket}/r"], ["**/*.md"], [], opts)


def test_freeze_and_snapshot_a_bucket(s3_server, bucket, opts, tmp_path):
    from jobs.sources.manifest import freeze, snapshot

    put_tree(s3_server, bucket, "frozen", CORPUS)
    manifest = freeze([f"s3://{bucket}/frozen/"], INCLUDE, EXCLUDE, "v1", tmp_path / "v1.json", opts)
    assert manifest["roots"] == [f"s3://{bucket}/frozen"] and len(manifest["files"]) == 7
    s3_server.client().put_object(Bucket=bucket, Key="frozen/hugo/server.md", Body=b"# changed since the freeze")
    snap = snapshot(manifest, manifest["roots"], INCLUDE, EXCLUDE, opts)
    assert snap.changed == ["hugo/server.md"] and len(snap.files) == 6 and snap.missing == []
