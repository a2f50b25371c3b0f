"""Corpora and run outputs in object storage, end to end: a real S3 protocol server on loopback (moto's
server mode), the real CLI, local Ray, the embedded PostgreSQL + pgvector.

Credentials come from a secret file with values that appear nowhere else, so the tests can look for
them in everything a run leaves behind: its output, logs, the runs table and the QA report.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
import pytest

from jobs.rows import CONTRACT_NAMES
from tests.conftest import COPIES, CORPUS, big_corpus, object_gets, write_config
from tests.test_ingest import (
    CLI,
    chunk_rows,
    cli,
    cli_process,
    each_chunk_once,
    pace_collection,
    status,
    summary_line,
    unpace_inserts,
    wait_for_done,
)

pytestmark = pytest.mark.slow
KEY_ID, SECRET = "AKIACORPUSMILLZEBRA1", "zebraSecret/9f3c1e7d5b2a40W+q8yRk"


@pytest.fixture()
def env(ray_address, pg_url, cm_home, s3_server):
    """A process on the session's Ray head (where credentials must reach workers and stay out of Ray's logs)."""
    e = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}  # the secret file is the only source
    e.update(RAY_ADDRESS=ray_address, CORPUSMILL_HOME=str(cm_home), TOKENIZERS_PARALLELISM="false")
    return e


def here(*args: str) -> subprocess.CompletedProcess:
    """A command in this process, without the AWS_* variables: the secret file is the only source."""
    return cli(*args, env={k: None for k in os.environ if k.startswith("AWS_")})


@pytest.fixture()
def bucket(s3_server, request) -> str:
    name = "cm-" + hashlib.sha256(request.node.name.encode()).hexdigest()[:12]
    s3_server.client().create_bucket(Bucket=name)
    return name


def secret_file(tmp_path: Path) -> Path:
    path = tmp_path / "s3-credentials.yaml"
    path.write_text(f"aws_access_key_id: {KEY_ID}\naws_secret_access_key: {SECRET}\n")
    return path


def s3_config(tmp_path: Path, name: str, collection: str, roots: list[str], s3_server, **overrides) -> Path:
    return write_config(tmp_path / name, collection, roots, storage__endpoint_url=s3_server.endpoint,
                        storage__region="us-east-1", storage__secret_file=str(secret_file(tmp_path)), **overrides)


def upload(client, bucket: str, prefix: str, root: Path) -> int:
    files = [p for p in sorted(root.rglob("*")) if p.is_file()]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda p: client.put_object(Bucket=bucket, Key=f"{prefix}/{p.relative_to(root).as_posix()}",
                                                  Body=p.read_bytes()), files))
    return len(files)


def bucket_objects(client, bucket: str, prefix: str = "") -> dict[str, bytes]:
    out = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get("Contents", []):
            out[obj["Key"]] = client.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read()
    return out


def parquet_docs(objects: dict[str, bytes]) -> tuple[list[str], set[str]]:
    """(column names, source paths) of every chunk part among `objects`."""
    import io

    import pyarrow.parquet as pq

    names, paths = [], set()
    for key, body in objects.items():
        if "/chunks/part-" in key and key.endswith(".parquet"):
            table = pq.read_table(io.BytesIO(body))
            names = table.column_names
            paths |= set(table.column("source_path").to_pylist())
    return names, paths


def test_ingest_from_a_bucket_into_a_bucket_and_rerun_incrementally(tmp_path, env, pg_url, s3_server, bucket):
    s3 = s3_server.client()
    upload(s3, bucket, "notes", CORPUS)
    cfg = s3_config(tmp_path, "c.yaml", "s3_incr", [f"s3://{bucket}/notes"], s3_server, report=True)
    out = cli_process("ingest", "--config", str(cfg), "--output", f"s3://{bucket}/runs", env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert summary_line(out.stdout) == "files: 7 added, 0 updated, 0 retried, 0 skipped, 0 deleted, 0 failed"
    rows = chunk_rows(pg_url, "s3_incr")
    assert {r[1] for r in rows} == {p.relative_to(CORPUS).as_posix() for p in CORPUS.rglob("*.*")
                                    if p.suffix in (".md", ".xlsx")}
    run_id = out.stdout.split("run ", 1)[1].split(" ", 1)[0]
    assert f"parquet: s3://{bucket}/runs/{run_id}/chunks" in out.stdout

    # The run's record is in the bucket: contract Parquet with every committed document, and the QA report.
    objects = bucket_objects(s3, bucket, f"runs/{run_id}/")
    names, paths = parquet_docs(objects)
    assert names == CONTRACT_NAMES + ["content_sha256"]
    assert paths == {r[1] for r in rows}
    for name in ("run.json", "qa/metrics.json", "qa/summary.md", "qa/report.html", "ray_stats.txt"):
        assert f"runs/{run_id}/{name}" in objects, sorted(objects)

    # Credentials: nowhere in the output, the logs, the runs table, the local staging copy or Ray's logs.
    with psycopg.connect(pg_url) as conn:
        runs = json.dumps(conn.execute("SELECT config, output_dir FROM corpusmill.runs WHERE collection = 's3_incr'"
                                       ).fetchall(), default=str)
    assert f"s3://{bucket}/runs/{run_id}" in runs and str(secret_file(tmp_path)) in runs
    staged = [p.read_bytes() for p in (Path(env["CORPUSMILL_HOME"]) / "staging" / run_id).rglob("*") if p.is_file()]
    ray_logs = [p.read_bytes() for p in Path(f"/tmp/cmray-{os.getpid()}").rglob("*.log") if p.is_file()]
    ray_logs += [p.read_bytes() for p in Path(f"/tmp/cmray-{os.getpid()}").rglob("*.out") if p.is_file()]
    ray_logs += [p.read_bytes() for p in Path(f"/tmp/cmray-{os.getpid()}").rglob("*.err") if p.is_file()]
    for secret in (SECRET, KEY_ID):
        assert secret not in out.stdout + out.stderr + runs
        for blob in [*objects.values(), *staged, *ray_logs]:
            assert secret.encode() not in blob

    # The report made again from the bucket: uploaded next to the Parquet, no local copy of the parts left.
    shutil.rmtree(Path(env["CORPUSMILL_HOME"]) / "staging" / run_id, ignore_errors=True)
    s3.delete_object(Bucket=bucket, Key=f"runs/{run_id}/qa/report.html")
    again = here("report", "--run-id", run_id, "--config", str(cfg))
    assert again.returncode == 0, again.stderr
    assert f"runs/{run_id}/qa/report.html" in bucket_objects(s3, bucket, f"runs/{run_id}/qa/")
    assert not list((Path(env["CORPUSMILL_HOME"]) / "staging" / run_id).rglob("part-*"))

    # A plan right after reads no object body: every listing matches what the store recorded.
    with s3_server.record() as requests:
        plan = here("plan", "--config", str(cfg), "--json")
    assert plan.returncode == 0, plan.stderr
    p = json.loads(plan.stdout)
    assert (p["skip"], p["read"]) == (7, 0) and object_gets(requests) == []

    # Change one object, add one, delete one, and re-upload another with the same bytes.
    server = CORPUS / "hugo" / "server.md"
    s3.put_object(Bucket=bucket, Key="notes/hugo/server.md",
                  Body=server.read_bytes() + b"\n## Zebra crossings\n\nThe zebra paragraph is new text added here.\n")
    s3.delete_object(Bucket=bucket, Key="notes/hugo/archetypes.md")
    s3.put_object(Bucket=bucket, Key="notes/new-note.md",
                  Body=b"# New note\n\nA fresh note about configuring the build cache directory.\n")
    same = CORPUS / "powershell" / "editorial-checklist.md"
    s3.put_object(Bucket=bucket, Key="notes/powershell/editorial-checklist.md", Body=same.read_bytes())
    with s3_server.record() as requests:
        plan = here("plan", "--config", str(cfg), "--json")
    assert plan.returncode == 0, plan.stderr
    p = json.loads(plan.stdout)
    assert (p["add"], p["update"], p["delete"], p["skip"]) == (1, 1, 1, 5)
    assert p["files"]["delete"] == ["hugo/archetypes.md"] and p["files"]["add"] == ["new-note.md"]
    assert p["read"] == 2  # the changed and the new object; an identical re-upload keeps its ETag
    assert sorted(object_gets(requests)) == [f"/{bucket}/notes/hugo/server.md", f"/{bucket}/notes/new-note.md"]

    out = here("ingest", "--config", str(cfg), "--output", f"s3://{bucket}/runs")  # an edit: in process
    assert out.returncode == 0, out.stdout + out.stderr
    assert "run in this process" in out.stderr
    assert summary_line(out.stdout) == "files: 1 added, 1 updated, 0 retried, 5 skipped, 1 deleted, 0 failed"
    after = chunk_rows(pg_url, "s3_incr")
    paths = {r[1] for r in after}
    assert "hugo/archetypes.md" not in paths and "new-note.md" in paths
    assert any("zebra paragraph" in r[4] for r in after)
    assert {r for r in rows if r[1] == "powershell/editorial-checklist.md"} <= set(after)

    # Reloading a database from the bucket's Parquet works without the sources.
    second = out.stdout.split("run ", 1)[1].split(" ", 1)[0]
    load = cli_process("load", "--from-parquet", f"s3://{bucket}/runs/{run_id}", f"s3://{bucket}/runs/{second}",
                       "--collection", "s3_reload", "--config", str(cfg), env=env)
    assert load.returncode == 0, load.stdout + load.stderr
    assert "from 2 run(s)" in load.stdout


def test_kill_9_and_resume_with_inputs_and_outputs_in_a_bucket(tmp_path, env, pg_url, s3_server, bucket):
    s3 = s3_server.client()
    big = big_corpus(CORPUS, tmp_path / "big", copies=6)  # 36 documents
    n_docs = upload(s3, bucket, "big", big)
    # Commit often, so the kill lands mid-run: every document as soon as it is whole, in small embed batches.
    overrides = dict(sink__flush_rows=1, sink__flush_seconds=0.05, embedding__resources__batch_size=8, **COPIES)
    cfg = s3_config(tmp_path, "k.yaml", "s3_kill", [f"s3://{bucket}/big"], s3_server, **overrides)
    runs = f"s3://{bucket}/runs"

    proc = subprocess.Popen(CLI + ["ingest", "--config", str(cfg), "--output", runs], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    paced = None
    try:
        paced = pace_collection(pg_url, "s3_kill", proc, seconds=0.5)  # each commit held: the kill lands mid-run
        wait_for_done(pg_url, "s3_kill", 5, proc)
        assert proc.poll() is None, "the ingest finished before it could be killed: make the corpus bigger"
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        if paced:
            unpace_inserts(pg_url, paced)
    st = status("s3_kill")
    assert 5 <= st["documents"]["done"] < n_docs and st["documents"]["pending"] > 0

    out = cli_process("ingest", "--config", str(cfg), "--output", runs, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert status("s3_kill")["documents"] == {"done": n_docs, "failed": 0, "pending": 0}
    resumed = each_chunk_once(pg_url, "s3_kill")
    # Equal to a clean run: the copies of a file hold the same bytes, so whichever run (killed or resumed)
    # processed each copy, every copy must end with exactly the same chunks (seq, text hash) as the others.
    per_copy: dict[str, dict[str, list]] = {}
    for _, path, seq, text_sha, _ in resumed:
        copy, rel = path.split("/", 1)
        per_copy.setdefault(rel, {}).setdefault(copy, []).append((seq, text_sha))
    for rel, copies in per_copy.items():
        assert len(copies) == 6 and len({tuple(c) for c in copies.values()}) == 1, rel
    # Every committed document is in the bucket's Parquet (the killed run's parts plus the resumed run's).
    _, paths = parquet_docs(bucket_objects(s3, bucket, "runs/"))
    assert paths == {r[1] for r in resumed}


def test_a_bucket_of_many_objects_is_replanned_without_reading_bodies(tmp_path, pg_url, s3_server, bucket):
    from jobs.config import load_config
    from jobs.plan import make_plan_for
    from jobs.sources.reads import READS
    from jobs.store.pgvector import PgStore

    s3 = s3_server.client()
    n = 1200  # more than one listing page (1,000 keys), without writing thousands of objects
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda i: s3.put_object(Bucket=bucket, Key=f"many/d{i % 30:02d}/note-{i:05d}.md",
                                              Body=f"# Note {i}\n\nSmall note number {i}.\n".encode()), range(n)))
    cfg_path = s3_config(tmp_path, "m.yaml", "s3_many", [f"s3://{bucket}/many"], s3_server)

    t0 = time.monotonic()
    with s3_server.record() as requests:
        first = here("plan", "--config", str(cfg_path), "--json")
    first_s = time.monotonic() - t0
    assert first.returncode == 0, first.stderr
    assert (json.loads(first.stdout)["add"], json.loads(first.stdout)["read"]) == (n, n)
    assert len(object_gets(requests)) == n

    # The checkpoint rows an ingest leaves for these documents (done, with their sha256 and listing),
    # written through the store's own commit path, as the sink writes a document without chunks.
    cfg = load_config(cfg_path)
    with PgStore(pg_url) as store:
        store.migrate()
        coll = store.ensure_collection("s3_many", cfg.embedding.model, 384)
        files = make_plan_for(cfg, store).add
        docs = [{"doc_id": f"d{i}", "source_path": f.source_path, "source_type": f.source_type,
                 "content_sha256": f.content_sha256, "pipeline_fingerprint": cfg.fingerprint(),
                 "source_size": f.size_bytes, "source_etag": f.listing_tag} for i, f in enumerate(files)]
        for doc in docs:
            store.commit_document(coll, doc, [], "seed")

    t0 = time.monotonic()
    with s3_server.record() as requests:
        second = here("plan", "--config", str(cfg_path), "--json")
    second_s = time.monotonic() - t0
    assert second.returncode == 0, second.stderr
    p = json.loads(second.stdout)
    assert (p["skip"], p["add"], p["read"]) == (n, 0, 0)
    assert object_gets(requests) == []
    listings = [r for r in requests if r[0] == "GET" and "list-type" in r[2]]
    assert len(listings) == 2  # 1,000 keys a page
    print(f"\nplan of {n} objects: first {first_s:.1f} s ({n} GETs), second {second_s:.1f} s "
          f"(0 GETs, {len(listings)} listing pages)")

    # In-process, with the module's own read counter: one changed object and one new one are all it reads.
    s3.put_object(Bucket=bucket, Key="many/d00/note-00000.md", Body=b"# Note 0\n\nChanged.\n")
    s3.put_object(Bucket=bucket, Key="many/d00/zz-new.md", Body=b"# New\n\nNew note.\n")
    before = READS["objects"]
    with PgStore(pg_url) as store:
        store.migrate()
        plan = make_plan_for(cfg, store)
    assert READS["objects"] - before == 2 == plan.hashed
    assert ([f.source_path for f in plan.update], [f.source_path for f in plan.add]) == (
        ["d00/note-00000.md"], ["d00/zz-new.md"])
