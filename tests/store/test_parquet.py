"""jobs/store/parquet.py: run outputs in a local directory and in a bucket (moto's S3 server on loopback)."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq

from jobs.sources.storage import StorageOptions
from jobs.store.parquet import PARQUET_NAMES, PartWriter, RunOutput, contract_schema, fetch_run, read_chunks, terms_current


def rows(n: int, doc: str = "d1") -> list[dict]:
    return [{"chunk_id": f"{doc}-{i}", "collection": "c", "doc_id": doc, "source_path": f"{doc}.md",
             "source_type": "markdown", "text": f"text {i}", "seq": i, "embedding": [0.0, 1.0],
             "content_sha256": "abc"} for i in range(n)]


def test_local_run_output_is_unchanged(tmp_path):
    out = RunOutput(tmp_path / "run", 2)
    assert out.uri == str(tmp_path / "run") and out.run_dir == tmp_path / "run"
    out.write_part(rows(2))
    assert read_chunks(tmp_path / "run").num_rows == 2
    assert RunOutput(tmp_path / "run", 2).write_part(rows(1)).name == "part-00001.parquet"


def test_remote_run_output_uploads_parts_whole_and_resumes_numbering(s3_server, bucket, tmp_path):
    opts = StorageOptions(endpoint_url=s3_server.endpoint)
    uri = f"s3://{bucket}/runs/r1"
    out = RunOutput(uri, 2, opts, staging=tmp_path / "staging")
    out.write_json("run.json", {"run_id": "r1"})
    out.write_part(rows(3))
    (out.qa_dir / "report.html").write_text("<html>")
    out.publish("qa")
    client = s3_server.client()
    keys = {o["Key"] for o in client.list_objects_v2(Bucket=bucket)["Contents"]}
    assert keys == {"runs/r1/run.json", "runs/r1/chunks/part-00000.parquet", "runs/r1/qa/report.html"}
    body = client.get_object(Bucket=bucket, Key="runs/r1/chunks/part-00000.parquet")["Body"].read()
    assert pq.read_table(io.BytesIO(body)).column_names == PARQUET_NAMES

    # Resumed elsewhere (a fresh staging directory): numbering continues, earlier parts come down for the
    # report, and a local part that never reached the bucket (its documents never committed) is dropped.
    (tmp_path / "other" / "chunks").mkdir(parents=True)
    (tmp_path / "other" / "chunks" / "part-00007.parquet").write_bytes(b"never uploaded")
    again = RunOutput(uri, 2, opts, staging=tmp_path / "other")
    assert sorted(p.name for p in again.chunks_dir.iterdir()) == ["part-00000.parquet"]
    assert again.write_part(rows(1, "d2")).name == "part-00001.parquet"
    assert read_chunks(uri, opts).num_rows == 4
    local = fetch_run(uri, opts, tmp_path / "fetched")
    assert (local / "qa" / "report.html").read_text() == "<html>" and len(list((local / "chunks").iterdir())) == 2


def test_a_part_says_which_analyser_made_its_terms(tmp_path):
    RunOutput(tmp_path / "run", 2).write_part(rows(2))
    assert PartWriter(str(tmp_path / "run"), 2, 1).write(
        pa.Table.from_pylist(rows(1, "d2"), schema=contract_schema(2).remove_metadata()), 0) == 1
    for part in sorted((tmp_path / "run" / "chunks").glob("part-*.parquet")):
        assert terms_current(pq.read_schema(part))
    assert not terms_current(pa.schema([("text", pa.string())]))  # a part written before the analyser had versions
