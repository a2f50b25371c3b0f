"""jobs/sources/fs.py: URIs, credentials, streaming listings, reads, and where Ray may read from.

Object-store cases run against a real S3 protocol server on loopback (moto's server mode)."""

from __future__ import annotations

import hashlib
import pickle
import uuid
from pathlib import Path

import pytest

from jobs.sources import fs
from jobs.sources.discover import discover
from jobs.sources.plan import StoredDoc
from tests.conftest import CORPUS, object_gets

INCLUDE = ["**/*.md", "**/*.xlsx", "**/*.csv"]
EXCLUDE = ["**/.*", "**/.*/**", "**/~$*"]


@pytest.fixture()
def bucket(s3_server) -> str:
    name = f"fs-{uuid.uuid4().hex[:10]}"
    s3_server.client().create_bucket(Bucket=name)
    return name


@pytest.fixture()
def opts(s3_server) -> fs.StorageOptions:
    return fs.StorageOptions(endpoint_url=s3_server.endpoint, region="us-east-1")


def put_tree(s3_server, bucket: str, prefix: str, root: Path) -> None:
    client = s3_server.client()
    for p in sorted(root.rglob("*")):
        if p.is_file():
            client.put_object(Bucket=bucket, Key=f"{prefix}/{p.relative_to(root).as_posix()}", Body=p.read_bytes())


# ---- URIs and credentials ---------------------------------------------------------------------------

def test_schemes_local_paths_and_joins():
    assert fs.scheme_of("s3://b/p") == "s3" and fs.scheme_of("gs://b") == "gs" and fs.scheme_of("abfs://c/p") == "abfs"
    assert fs.scheme_of("/data/notes") is None and fs.scheme_of("file:///data/notes") is None
    assert fs.is_remote("s3://b/p") and not fs.is_remote("relative/dir")
    with pytest.raises(ValueError, match="unsupported URI scheme 'ftp'"):
        fs.scheme_of("ftp://host/x")
    assert fs.join("s3://b/runs/", "r1") == "s3://b/runs/r1"
    assert fs.join("/tmp/runs", "r1") == "/tmp/runs/r1"
    assert fs.normalize_root("s3://b/p/") == "s3://b/p" and fs.normalize_root("file:///x") == "file:///x"
    assert Path(fs.normalize_root("rel")).is_absolute()


def test_credentials_in_a_uri_are_refused_without_echoing_them():
    with pytest.raises(ValueError) as err:
        fs.check_uri("s3://AKIAXX:hunter2@bucket/prefix")
    assert "hunter2" not in str(err.value) and "AKIAXX" not in str(err.value)


def test_secret_file_yaml_and_ini_values_stay_masked(tmp_path):
    yml = tmp_path / "s.yaml"
    yml.write_text("aws_access_key_id: AKIAVISIBLE\naws_secret_access_key: sup3rs3cret\n")
    secrets = fs.read_secret_file(yml)
    assert secrets["aws_secret_access_key"].get_secret_value() == "sup3rs3cret"
    ini = tmp_path / "credentials"
    ini.write_text("[default]\naws_access_key_id = A1\naws_secret_access_key = s1\n[ci]\naws_access_key_id = A2\n"
                   "aws_secret_access_key = s2\n")
    assert fs.read_secret_file(ini, "ci")["aws_secret_access_key"].get_secret_value() == "s2"

    class Storage:  # the config section's shape
        endpoint_url, region, profile, anonymous, secret_file = "http://127.0.0.1:1", None, None, False, yml

    opts = fs.StorageOptions.from_config(Storage)
    # What travels to Ray workers (pickled) and what a log line or traceback would show.
    assert "sup3rs3cret" not in repr(opts) and "sup3rs3cret" not in str(opts)
    assert pickle.loads(pickle.dumps(opts)) == opts
    kw = opts.fsspec_kwargs("s3")
    assert (kw["key"], kw["secret"], kw["endpoint_url"]) == ("AKIAVISIBLE", "sup3rs3cret", "http://127.0.0.1:1")

    bad = tmp_path / "bad.yaml"
    bad.write_text("aws_secret_acess_key: typo-value\n")
    with pytest.raises(ValueError, match="unknown keys") as err:
        fs.read_secret_file(bad)
    assert "typo-value" not in str(err.value)


def test_endpoint_from_the_standard_aws_variables(monkeypatch):
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://minio.local:9000")
    assert fs.StorageOptions().fsspec_kwargs("s3")["endpoint_url"] == "http://minio.local:9000"
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://ceph.local:7480")
    assert fs.StorageOptions().fsspec_kwargs("s3")["endpoint_url"] == "http://ceph.local:7480"
    assert fs.StorageOptions(endpoint_url="http://cfg:1").fsspec_kwargs("s3")["endpoint_url"] == "http://cfg:1"
    assert fs.StorageOptions(anonymous=True).fsspec_kwargs("s3")["anon"] is True


# ---- listings -----------------------------------------------------------------------------------------

def test_local_listing_is_sorted_with_mtime_tags(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "x.md").write_text("x")
    (tmp_path / "a.md").write_text("aa")
    items = list(fs.iter_files(tmp_path))
    assert [(i.rel, i.size) for i in items] == [("a.md", 2), ("b/x.md", 1)]
    assert all(i.tag.startswith("mtime:") for i in items)
    with pytest.raises(FileNotFoundError, match="not a directory"):
        list(fs.iter_files(tmp_path / "missing"))


def test_s3_listing_streams_page_by_page_with_etags(s3_server, bucket, opts, monkeypatch):
    client = s3_server.client()
    for i in range(7):
        client.put_object(Bucket=bucket, Key=f"pre/d{i % 2}/n{i}.md", Body=b"x" * i)
    client.put_object(Bucket=bucket, Key="prefix2/other.md", Body=b"not under pre/")
    monkeypatch.setattr(fs, "PAGE", 3)
    with s3_server.record() as requests:
        it = fs.iter_files(f"s3://{bucket}/pre/", opts)
        first = next(it)  # the first object arrives before the listing is complete
        rest = list(it)
    items = [first, *rest]
    assert [i.rel for i in items] == sorted(f"d{i % 2}/n{i}.md" for i in range(7))
    assert {i.rel: i.size for i in items}["d1/n5.md"] == 5
    assert all(i.tag.startswith("etag:") and '"' not in i.tag for i in items)
    assert items[0].uri == f"s3://{bucket}/pre/{items[0].rel}"
    assert object_gets(requests) == []  # listing only: no object body read
    with pytest.raises(FileNotFoundError, match="no objects"):
        list(fs.iter_files(f"s3://{bucket}/nothing-here", opts))


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
    before = fs.READS["objects"]
    with s3_server.record() as requests:
        again = discover([root], INCLUDE, EXCLUDE, opts, known)
    assert sorted(object_gets(requests)) == [f"/{bucket}/corpus/hugo/archetypes.md", f"/{bucket}/corpus/hugo/server.md"]
    assert fs.READS["objects"] - before == 2
    by_path = {f.source_path: f for f in again}
    assert by_path["hugo/server.md"].content_sha256 == hashlib.sha256(b"# Server\n\nchanged").hexdigest()
    assert not by_path["workbooks/stanley-cups.xlsx"].hashed
    assert by_path["workbooks/stanley-cups.xlsx"].content_sha256 == known["workbooks/stanley-cups.xlsx"].content_sha256


def test_two_roots_with_the_same_relative_path_are_refused_across_filesystems(s3_server, bucket, opts, tmp_path):
    (tmp_path / "same.md").write_text("local")
    s3_server.client().put_object(Bucket=bucket, Key="r/same.md", Body=b"remote")
    with pytest.raises(ValueError, match="same.md exists under two input roots"):
        discover([tmp_path, f"s3://{bucket}/r"], ["**/*.md"], [], opts)


# ---- reading work items ---------------------------------------------------------------------------

def test_work_bytes_from_a_bucket_from_the_driver_and_a_changed_object(s3_server, bucket, opts):
    body = b"# T\n\nbody"
    s3_server.client().put_object(Bucket=bucket, Key="w/t.md", Body=body)
    work = {"source_path": "t.md", "abs_path": f"s3://{bucket}/w/t.md", "content_sha256": hashlib.sha256(body).hexdigest()}
    assert fs.work_bytes(work, opts) == body
    assert fs.work_bytes({**work, "abs_path": "/nonexistent/t.md", "content": body}) == body  # --read-via-driver
    s3_server.client().put_object(Bucket=bucket, Key="w/t.md", Body=b"# T\n\nedited after the plan")
    with pytest.raises(fs.SourceChanged, match="changed after the plan"):
        fs.work_bytes(work, opts)


def test_work_local_file_keeps_the_name_and_cleans_up(s3_server, bucket, opts, tmp_path):
    body = b"Team,Cups\nToronto Maple Leafs,13\n"
    s3_server.client().put_object(Bucket=bucket, Key="x/cups.csv", Body=body)
    work = {"source_path": "x/cups.csv", "abs_path": f"s3://{bucket}/x/cups.csv", "size_bytes": len(body),
            "content_sha256": hashlib.sha256(body).hexdigest()}
    with fs.work_local_file(work, opts) as path:
        assert path.name == "cups.csv" and path.read_bytes() == body  # a CSV's sheet is named after its file
    assert not path.exists()
    with pytest.raises(ValueError, match="over excel.max_file_bytes"):
        with fs.work_local_file(work, opts, max_bytes=4):
            pass
    local = tmp_path / "here.csv"
    local.write_bytes(body)
    with fs.work_local_file({"source_path": "here.csv", "abs_path": str(local)}) as path:
        assert path == local  # a local source is used in place


# ---- where Ray may read from ----------------------------------------------------------------------

@pytest.mark.parametrize("roots, nodes, via_driver, refused", [
    (["/data/notes"], 1, False, False),  # one node: the path is where the tasks run
    (["/data/notes"], 3, False, True),  # the tasks on the other nodes would not find it
    (["/data/notes"], 3, True, False),  # the driver reads the files into the work items
    (["s3://b/notes"], 3, False, False),
    (["file:///mnt/shared/notes"], 3, False, False),  # said on purpose: mounted on every node
    (["s3://b/notes", "relative/dir"], 2, False, True),
])
def test_local_paths_on_a_multi_node_ray(roots, nodes, via_driver, refused):
    message = fs.local_read_refusal(roots, nodes, via_driver)
    assert (message is not None) == refused
    if refused:
        assert "--read-via-driver" in message and "s3://" in message and f"{nodes} nodes" in message


# ---- the parse stages read work items where they run ------------------------------------------------

def _work(uri: str, source_path: str, body: bytes, source_type: str) -> dict:
    return {"doc_id": "d", "collection": "c", "source_path": source_path, "abs_path": uri, "source_type": source_type,
            "content_sha256": hashlib.sha256(body).hexdigest(), "size_bytes": len(body), "pipeline_fingerprint": "fp",
            "run_id": "r"}


def test_parse_stages_read_objects_and_driver_carried_bytes(s3_server, bucket, opts):
    from jobs.config import ExcelConfig, QualityConfig
    from jobs.excel.stage import excel_to_chunks
    from jobs.markdown.parse import parse_documents

    md = (CORPUS / "hugo" / "server.md").read_bytes()
    xlsx = (CORPUS / "workbooks" / "stanley-cups.xlsx").read_bytes()
    client = s3_server.client()
    client.put_object(Bucket=bucket, Key="c/hugo/server.md", Body=md)
    client.put_object(Bucket=bucket, Key="c/workbooks/stanley-cups.xlsx", Body=xlsx)

    from_bucket = parse_documents([_work(f"s3://{bucket}/c/hugo/server.md", "hugo/server.md", md, "markdown")],
                                  storage=opts)
    carried = parse_documents([{**_work("/not/on/this/node.md", "hugo/server.md", md, "markdown"), "content": md}])
    local = parse_documents([_work(str(CORPUS / "hugo" / "server.md"), "hugo/server.md", md, "markdown")])
    assert not from_bucket[0].get("error_stage") and "content" not in carried[0]
    assert from_bucket[0]["sections_json"] == carried[0]["sections_json"] == local[0]["sections_json"]

    kw = dict(excel=ExcelConfig(), quality=QualityConfig(), embedding_model="sentence-transformers/all-MiniLM-L6-v2")
    remote_rows = excel_to_chunks([_work(f"s3://{bucket}/c/workbooks/stanley-cups.xlsx", "workbooks/stanley-cups.xlsx",
                                         xlsx, "excel")], storage=opts, **kw)
    local_rows = excel_to_chunks([_work(str(CORPUS / "workbooks" / "stanley-cups.xlsx"), "workbooks/stanley-cups.xlsx",
                                        xlsx, "excel")], **kw)
    assert not remote_rows[0].get("error_stage")
    assert [r["text"] for r in remote_rows] == [r["text"] for r in local_rows] and len(remote_rows) > 5


def test_freeze_and_snapshot_a_bucket(s3_server, bucket, opts, tmp_path):
    from jobs.sources.manifest import freeze, snapshot

    put_tree(s3_server, bucket, "frozen", CORPUS)
    manifest = freeze([f"s3://{bucket}/frozen/"], INCLUDE, EXCLUDE, "v1", tmp_path / "v1.json", opts)
    assert manifest["roots"] == [f"s3://{bucket}/frozen"] and len(manifest["files"]) == 7
    s3_server.client().put_object(Bucket=bucket, Key="frozen/hugo/server.md", Body=b"# changed since the freeze")
    snap = snapshot(manifest, manifest["roots"], INCLUDE, EXCLUDE, opts)
    assert snap.changed == ["hugo/server.md"] and len(snap.files) == 6 and snap.missing == []
