"""The plan of a listing, made a page at a time against the real store (jobs/plan.py): the same plan as
the whole list gives, unchanged files counted and not kept, deletions found in the database."""

from __future__ import annotations

import json
import os
import shutil

import psycopg
import pytest

from jobs.config import JobConfig, apply_overrides
from jobs.plan import make_plan_for
from jobs.sources import discover as discover_module
from jobs.sources.changes import make_plan
from jobs.sources.discover import discover
from tests.conftest import write_config
from tests.test_ingest import cli, summary_line


def _paths(files) -> list[str]:
    return sorted(f.source_path for f in files)


def test_a_listing_planned_a_page_at_a_time_plans_what_the_whole_list_plans(tmp_path, store, pg_url, monkeypatch):
    root = tmp_path / "notes"
    for i in range(23):
        (root / f"d{i % 3}").mkdir(parents=True, exist_ok=True)
        (root / f"d{i % 3}" / f"n{i:02d}.md").write_text(f"# Note {i}\n\nText of note {i}.\n")
    cfg = apply_overrides(JobConfig(), database_url=pg_url, collection="paged_plan", inputs=[str(root)])
    coll = store.ensure_collection(cfg.collection, cfg.embedding.model, 4)
    first = make_plan_for(cfg, store)
    assert (len(first.add), first.unchanged, first.hashed) == (23, 0, 23)
    # Checkpoint rows as an ingest leaves them, through the store's own commit path: all but two done
    # (one failed), and one stored document whose file is gone.
    done = first.add[:20]
    for i, f in enumerate(done):
        store.commit_document(coll, {"doc_id": f"doc{i}", "source_path": f.source_path, "source_type": "markdown",
                                     "content_sha256": f.content_sha256, "pipeline_fingerprint": cfg.fingerprint(),
                                     "source_size": f.size_bytes, "source_etag": f.listing_tag}, [], "seed")
    store.commit_document(coll, {"doc_id": "gone", "source_path": "gone.md", "source_type": "markdown",
                                 "content_sha256": "x", "pipeline_fingerprint": cfg.fingerprint()}, [], "seed")
    failed = first.add[20]
    store.mark_pending(cfg.collection, "seed", [{"doc_id": "failed", "source_path": failed.source_path,
                                                 "source_type": "markdown", "source_size": 1, "source_etag": None}])
    changed, touched = root / done[3].source_path, root / done[5].source_path
    changed.write_text(changed.read_text() + "\nMore.\n")
    os.utime(touched, ns=(1, 1))  # same content under a new listing: read, then its listing recorded

    monkeypatch.setattr(discover_module, "HASH_BATCH", 4)  # 23 files: six pages
    relisted = []
    plan = make_plan_for(cfg, store, on_relisted=relisted.append)
    whole = make_plan(discover([root], cfg.input.include, cfg.input.exclude),
                      store.stored_documents(cfg.collection), cfg.fingerprint())
    for name in ("add", "update", "retry"):
        assert _paths(getattr(plan, name)) == _paths(getattr(whole, name)), name
    assert plan.counts() == whole.counts() == {"add": 2, "update": 1, "retry": 1, "skip": 19, "delete": 1,
                                               "failed_before": 0}
    assert plan.delete == ["gone.md"] and plan.relisted == []  # handed over, not kept
    assert [_paths(page) for page in relisted] == [[done[5].source_path]]
    assert plan.hashed == 2 + 1 + 1 + 1  # the new, the changed, the retried and the touched file

    # keep_removed plans no deletion; a root that vanished plans none either (listing raises).
    assert make_plan_for(apply_overrides(cfg, keep_removed=True), store).delete == []
    shutil.rmtree(root)
    with pytest.raises(FileNotFoundError):
        make_plan_for(cfg, store)


def test_a_file_that_failed_on_its_content_is_not_read_again_until_it_changes(tmp_path, store, pg_url):
    from jobs.ingest import _record_lost
    from jobs.store.sink_stats import SinkStats

    root = tmp_path / "notes"
    root.mkdir()
    (root / "good.md").write_text("# Good\n\nFine text.\n")
    bad = root / "bad.md"
    bad.write_bytes("# Caf\xe9\n\nNot UTF-8.\n".encode("latin-1"))
    (root / "lost.md").write_text("# Lost\n\nA worker died under it.\n")
    cfg = apply_overrides(JobConfig(), database_url=pg_url, collection="settled_failures", inputs=[str(root)])
    coll = store.ensure_collection(cfg.collection, cfg.embedding.model, 4)
    docs = {f.source_path: {"doc_id": f.source_path, "source_path": f.source_path, "source_type": "markdown",
                            "content_sha256": f.content_sha256, "pipeline_fingerprint": cfg.fingerprint(),
                            "source_size": f.size_bytes, "source_etag": f.listing_tag}
            for f in make_plan_for(cfg, store).add}
    # A run as the ingest leaves it: planned pending with the listing, one done, one failed on its content,
    # one the pipeline never returned (that says nothing about its content: the next run retries it).
    store.mark_pending(cfg.collection, "r1", list(docs.values()))
    store.commit_document(coll, docs["good.md"], [], "r1")
    store.record_failure(cfg.collection, docs["bad.md"], "r1", "parse_markdown", "NotUtf8Error", "not valid UTF-8",
                         retryable=False)
    _record_lost(store, coll, "r1", SinkStats())

    def record(files):  # as the ingest records an unchanged file's new listing
        store.record_listing(cfg.collection, [(f.source_path, f.size_bytes, f.listing_tag) for f in files])

    plan = make_plan_for(cfg, store, on_relisted=record)
    assert _paths(plan.retry) == ["lost.md"] and plan.failed_before == 1
    assert plan.hashed == 1  # the lost file; the failed one's listing says it is the content that failed
    assert store.status(cfg.collection)["failed"] == [
        {"source_path": "bad.md", "error": "[parse_markdown] NotUtf8Error: not valid UTF-8"},
        {"source_path": "lost.md", "error": store.status(cfg.collection)["failed"][1]["error"]}]

    os.utime(bad, ns=(1, 1))  # the same content under a new listing: read once, still the failure it was
    plan = make_plan_for(cfg, store, on_relisted=record)
    assert (_paths(plan.retry), plan.failed_before, plan.hashed) == (["lost.md"], 1, 2)
    assert make_plan_for(cfg, store).hashed == 1  # its new listing was recorded

    assert _paths(make_plan_for(cfg, store, retry_failed=True).retry) == ["bad.md", "lost.md"]
    bad.write_text("# Café\n\nNow UTF-8.\n", encoding="utf-8")
    plan = make_plan_for(cfg, store)
    assert (_paths(plan.retry), plan.failed_before) == (["bad.md", "lost.md"], 0)


def _page_and_its_copy(tmp_path, corpus, pg_url, cm_home, collection: str):
    """A page ingested, then a copy of it: its text is stored once, under the first page. Returns the
    folder and the config (two documents: they run in process, in this one)."""
    root = tmp_path / "pages"
    root.mkdir()
    page = corpus / "hugo" / "server.md"
    shutil.copy(page, root / "server.md")
    cfg = write_config(tmp_path / "c.yaml", collection, [root])
    for _ in range(2):
        out = cli("ingest", "--config", str(cfg))
        assert out.returncode == 0, out.stdout + out.stderr
        shutil.copy(page, root / "server-copy.md")
    return root, cfg


@pytest.mark.slow
def test_an_unchanged_copy_of_a_deleted_page_is_rechunked_in_the_same_run(tmp_path, corpus, pg_url, cm_home):
    root, cfg = _page_and_its_copy(tmp_path, corpus, pg_url, cm_home, "plan_released")
    (root / "server.md").unlink()
    out = cli("ingest", "--config", str(cfg))
    assert out.returncode == 0, out.stdout + out.stderr
    assert summary_line(out.stdout) == "files: 0 added, 0 updated, 1 retried, 0 skipped, 1 deleted, 0 failed"
    assert "1 unchanged documents re-chunked" in out.stderr
    with psycopg.connect(pg_url) as conn:
        table = conn.execute("SELECT chunk_table FROM corpusmill.collections WHERE name = 'plan_released'").fetchone()[0]
        paths = {r[0] for r in conn.execute(f"SELECT DISTINCT source_path FROM corpusmill.{table}")}
        status = conn.execute("SELECT status FROM corpusmill.documents WHERE collection = 'plan_released'").fetchall()
    assert paths == {"server-copy.md"} and status == [("done",)]


@pytest.mark.slow
def test_an_unchanged_copy_of_text_an_updated_page_let_go_is_rechunked_before_the_run_ends(
        tmp_path, corpus, pg_url, cm_home):
    root, cfg = _page_and_its_copy(tmp_path, corpus, pg_url, cm_home, "plan_rehomed")
    (root / "server.md").write_text("# Server\n\nThis page now says something else entirely.\n", encoding="utf-8")
    out = cli("ingest", "--config", str(cfg))
    assert out.returncode == 0, out.stdout + out.stderr
    assert summary_line(out.stdout) == "files: 0 added, 1 updated, 1 retried, 0 skipped, 0 deleted, 0 failed"
    assert "re-chunked 1 unchanged document(s) in this run" in out.stdout
    with psycopg.connect(pg_url) as conn:
        table = conn.execute("SELECT chunk_table FROM corpusmill.collections WHERE name = 'plan_rehomed'").fetchone()[0]
        held = conn.execute(f"SELECT count(*) FROM corpusmill.{table} WHERE source_path = 'server-copy.md'").fetchone()[0]
        status = conn.execute("SELECT source_path, status FROM corpusmill.documents WHERE collection = 'plan_rehomed' "
                              "ORDER BY 1").fetchall()
    assert held > 1  # the copy holds the page's old text: none of it left the index
    assert status == [("server-copy.md", "done"), ("server.md", "done")]


@pytest.mark.slow
def test_a_changed_copy_that_committed_before_its_holder_let_the_text_go_is_rechunked_before_the_run_ends(
        tmp_path, corpus, pg_url, cm_home):
    """Both pages changed in one run: the copy commits first (recording its text as the other page's),
    then the page it copied lets that text go. The copy was processed in this run already; it goes
    through again, so no text is left held by nobody."""
    root, _ = _page_and_its_copy(tmp_path, corpus, pg_url, cm_home, "plan_both_changed")
    page = (root / "server.md").read_text(encoding="utf-8")
    (root / "server-copy.md").write_text(page + "\n\n## Added later\n\nA paragraph only the copy has.\n",
                                         encoding="utf-8")
    (root / "server.md").write_text("# Server\n\nThis page now says something else entirely.\n", encoding="utf-8")
    # A commit a document, the copy's first (plan order), as a run's writers may happen to commit them.
    one_by_one = write_config(tmp_path / "one.yaml", "plan_both_changed", [root], sink__flush_rows=1)
    out = cli("ingest", "--config", str(one_by_one))
    assert out.returncode == 0, out.stdout + out.stderr
    with psycopg.connect(pg_url) as conn:
        table = conn.execute("SELECT chunk_table FROM corpusmill.collections WHERE name = 'plan_both_changed'").fetchone()[0]
        held = conn.execute(f"SELECT count(*) FROM corpusmill.{table} WHERE source_path = 'server-copy.md'").fetchone()[0]
        status = conn.execute("SELECT source_path, status FROM corpusmill.documents WHERE collection = "
                              "'plan_both_changed' ORDER BY 1").fetchall()
    assert held > 1  # the copy holds the page's old text now
    assert status == [("server-copy.md", "done"), ("server.md", "done")]
    assert "committed 2/2 documents" in out.stderr  # the copy's second pass is not a third document


def test_a_run_whose_input_holds_none_of_the_collection_stops_before_deleting_it(tmp_path, pg_url):
    """A wrong --input (an empty folder, a mount not there) would delete every document of the collection:
    the run stops with exit 2 and deletes nothing, `plan` says so, and --allow-delete-all lets it through."""
    notes, empty, other = tmp_path / "notes", tmp_path / "empty", tmp_path / "other"
    for folder in (notes, empty, other):
        folder.mkdir()
    for name in ("a", "b"):
        (notes / f"{name}.md").write_text(f"# Note {name}\n\nThe text of note {name}.\n")
    (other / "c.md").write_text("# Note c\n\nAnother tree altogether.\n")
    cfg = str(write_config(tmp_path / "d.yaml", "plan_delete_all", [notes]))
    assert cli("ingest", "--config", cfg).returncode == 0
    out = cli("ingest", "--config", cfg, "--input", str(empty))
    assert out.returncode == 2, out.stdout + out.stderr
    assert (f"would delete all 2 documents of collection 'plan_delete_all': no file under {empty} matches "
            "input.include") in out.stderr and "--allow-delete-all" in out.stderr
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT count(*) FROM corpusmill.documents WHERE collection = 'plan_delete_all' "
                            "AND status = 'done'").fetchone()[0] == 2
    # Files in their place (a tree renamed, moved into a folder) are no accident: the plan goes on.
    assert "ingest would stop" not in cli("plan", "--config", cfg, "--input", str(other)).stdout
    out = cli("plan", "--config", cfg, "--input", str(empty))
    assert out.returncode == 0 and "ingest would stop: this run would delete all 2 documents" in out.stdout
    out = cli("plan", "--config", cfg, "--input", str(empty), "--json")
    assert json.loads(out.stdout)["ingest_would_stop"].startswith("this run would delete all 2 documents")
    out = cli("ingest", "--config", cfg, "--input", str(empty), "--allow-delete-all")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "2 deleted" in out.stdout
