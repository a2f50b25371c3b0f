"""jobs/sources/reads.py: reading work items (from a bucket, carried by the driver, changed since the plan),
the parse stages that read through it, and where Ray may read from.

Object-store cases run against a real S3 protocol server on loopback (moto's server mode)."""

from __future__ import annotations

import hashlib

import pytest

from jobs.sources.reads import SourceChanged, local_read_refusal, work_bytes, work_local_file
from tests.conftest import CORPUS

# ---- reading work items ---------------------------------------------------------------------------

def test_work_bytes_from_a_bucket_from_the_driver_and_a_changed_object(s3_server, bucket, opts):
    body = b"# T\n\nbody"
    s3_server.client().put_object(Bucket=bucket, Key="w/t.md", Body=body)
    work = {"source_path": "t.md", "abs_path": f"s3://{bucket}/w/t.md", "content_sha256": hashlib.sha256(body).hexdigest()}
    assert work_bytes(work, opts) == body
    assert work_bytes({**work, "abs_path": "/nonexistent/t.md", "content": body}) == body  # --read-via-driver
    s3_server.client().put_object(Bucket=bucket, Key="w/t.md", Body=b"# T\n\nedited after the plan")
    with pytest.raises(SourceChanged, match="changed after the plan"):
        work_bytes(work, opts)


def test_work_local_file_keeps_the_name_and_cleans_up(s3_server, bucket, opts, tmp_path):
    body = b"Team,Cups\nToronto Maple Leafs,13\n"
    s3_server.client().put_object(Bucket=bucket, Key="x/cups.csv", Body=body)
    work = {"source_path": "x/cups.csv", "abs_path": f"s3://{bucket}/x/cups.csv", "size_bytes": len(body),
            "content_sha256": hashlib.sha256(body).hexdigest()}
    with work_local_file(work, opts) as path:
        assert path.name == "cups.csv" and path.read_bytes() == body  # a CSV's sheet is named after its file
    assert not path.exists()
    with pytest.raises(ValueError, match="over excel.max_file_bytes"), work_local_file(work, opts, max_bytes=4):
        pass
    local = tmp_path / "here.csv"
    local.write_bytes(body)
    with work_local_file({"source_path": "here.csv", "abs_path": str(local)}) as path:
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
    message = local_read_refusal(roots, nodes, via_driver)
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
    assert from_bucket[0]["sections"] == carried[0]["sections"] == local[0]["sections"]

    kw = dict(excel=ExcelConfig(), quality=QualityConfig(), embedding_model="sentence-transformers/all-MiniLM-L6-v2")
    remote_rows = excel_to_chunks([_work(f"s3://{bucket}/c/workbooks/stanley-cups.xlsx", "workbooks/stanley-cups.xlsx",
                                         xlsx, "excel")], storage=opts, **kw)
    local_rows = excel_to_chunks([_work(str(CORPUS / "workbooks" / "stanley-cups.xlsx"), "workbooks/stanley-cups.xlsx",
                                        xlsx, "excel")], **kw)
    assert not remote_rows[0].get("error_stage")
    assert [r["text"] for r in remote_rows] == [r["text"] for r in local_rows] and len(remote_rows) > 5
