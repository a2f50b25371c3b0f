"""A document that kills its worker settles (issue 42 item 5; jobs/store/lost.py): lost in
`ray.lost_document_runs` runs in a row, the last time alone, it is recorded failed for good and no run
reads it again until it changes or `ingest --retry-failed`. Through the real CLI on the session's Ray
head, the worker killed by the fault hook of jobs/on_ray.py (CORPUSMILL_FAULT_KILL_WORKER)."""

from __future__ import annotations

import json

import psycopg
import pytest

from jobs.store.pgvector import PgStore
from jobs.store.work_items import WorkItems
from tests.conftest import cli_process, run_cli, write_config
from tests.factories import doc_row

pytestmark = pytest.mark.slow
KILLER = "hugo/server.md"


def _plan(cfg, *extra: str) -> dict:
    out = run_cli("plan", "--config", str(cfg), "--json", *extra)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _errors(pg_url: str, collection: str) -> list[tuple]:
    with psycopg.connect(pg_url) as conn:
        return conn.execute("SELECT source_path, error_class, retryable FROM corpusmill.errors WHERE collection = %s "
                            "ORDER BY id", (collection,)).fetchall()


def test_a_document_that_kills_its_worker_run_after_run_settles_and_is_not_read_again(tmp_path, corpus, ray_env,
                                                                                         pg_url):
    cfg = write_config(tmp_path / "k.yaml", "e2e_killer", [corpus], ray__task_retries=0, ray__lost_document_runs=2)
    env = dict(ray_env, CORPUSMILL_FAULT_KILL_WORKER=KILLER)

    first = cli_process("ingest", "--config", str(cfg), env=env)
    assert first.returncode == 1, first.stdout + first.stderr[-3000:]
    assert f"{KILLER}  [pipeline] LostDocument" in first.stdout and "it will be retried" in first.stdout
    assert _errors(pg_url, "e2e_killer") == [(KILLER, "LostDocument", True)]
    assert _plan(cfg)["retry"] == 1  # lost once: the next run reads it again

    second = cli_process("ingest", "--config", str(cfg), env=env)
    assert second.returncode == 1, second.stdout + second.stderr[-3000:]
    assert "each processed once more, alone" in second.stderr
    assert "in 2 runs in a row, the last time alone" in second.stdout
    assert _errors(pg_url, "e2e_killer") == [(KILLER, "LostDocument", True), (KILLER, "LostDocument", False)]
    status = json.loads(run_cli("status", "--collection", "e2e_killer", "--json").stdout)
    assert status["documents"] == {"done": 6, "failed": 1, "pending": 0}
    assert [x["source_path"] for x in status["failed"]] == [KILLER]
    assert "not read again until it changes or `ingest --retry-failed`" in status["failed"][0]["error"]
    text = run_cli("status", "--collection", "e2e_killer").stdout
    assert f"failed   {KILLER}: [pipeline] LostDocument: its worker process died" in text

    # Settled: no run reads it again, unless asked, or once it changes.
    plan = _plan(cfg)
    assert (plan["retry"], plan["failed_before"]) == (0, 1)
    assert _plan(cfg, "--retry-failed")["retry"] == 1
    (corpus / KILLER).write_text((corpus / KILLER).read_text() + "\nOne more line.\n")
    assert _plan(cfg)["retry"] == 1


def test_a_document_lost_beside_the_one_that_kills_settles_only_if_it_dies_alone_too(pg_url):
    """WorkItems.lost: a run's pending document settles when its errors of the runs before, newest first,
    are LostDocument on the content and pipeline its work item holds; other content, another failure or
    too few runs do not."""
    with PgStore(pg_url) as store:
        store.migrate()
        store.ensure_collection("lost_chain", "m", 4)
        docs = {name: doc_row(name, sha=f"sha-{name}") for name in ("a", "b", "c", "d")}
        for run, lost in (("r1", "abcd"), ("r2", "abd")):
            store.mark_pending("lost_chain", run, list(docs.values()))
            for name in lost:
                store.record_failure("lost_chain", docs[name], run, "pipeline", "LostDocument", "lost")
        store.record_failure("lost_chain", docs["d"], "r2", "load", "DataError", "bad")  # d's last error is another
        docs["b"]["content_sha256"] = "sha-b2"  # b changed since
        with WorkItems(pg_url, store.schema, "lost_chain", "r3") as work:
            work.add(list(docs.values()), [(1, None)] * len(docs))
            store.mark_pending_work("lost_chain", "r3")
            assert {d["source_path"]: settles for d, settles in work.lost(3)} == {
                "a.md": True, "b.md": False, "c.md": False, "d.md": False}
            assert {d["source_path"]: settles for d, settles in work.lost(4)} == dict.fromkeys(
                ("a.md", "b.md", "c.md", "d.md"), False)
            assert work.repeat(["a.md", "c.md"]) == 0  # only items of rounds before the current one
            work.begin_round()
            assert work.repeat(["a.md", "c.md"]) == 2
            assert sorted(i["source_path"] for i in work.items("markdown")) == ["a.md", "c.md"]
