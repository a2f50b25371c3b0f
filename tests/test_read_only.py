"""Reads never write (jobs/store/schema.py): `search`, `status`, `serve` and `plan` work as a PostgreSQL role that
may only connect and SELECT, a schema that needs upgrading is named with the command that upgrades it,
and hybrid-doc's document vectors are built by `corpusmill upgrade`, never by a search."""

from __future__ import annotations

import json

import psycopg
import pytest
from psycopg import sql

from jobs.cli import main
from jobs.store import doc_vectors
from jobs.store.pgvector import PgStore
from jobs.store.schema import SchemaOutdated
from tests import serving

NAME = "readonly_t"
ROLE = "cm_reader_t"
MISSED = "003_source_listing"  # ADD COLUMN IF NOT EXISTS: applied twice, the same


@pytest.fixture(scope="module")
def reader_url(pg_url):
    """The collection, built by the (owner) write side, and the URL of a role with CONNECT, USAGE on the
    schema and SELECT on its tables: nothing else."""
    with PgStore(pg_url) as store:
        store.migrate()
        serving.build(store, NAME)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (ROLE,)).fetchone():
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(ROLE)))
        conn.execute(sql.SQL("GRANT CONNECT ON DATABASE postgres TO {}").format(sql.Identifier(ROLE)))
        conn.execute(sql.SQL("GRANT USAGE ON SCHEMA corpusmill TO {}").format(sql.Identifier(ROLE)))
        conn.execute(sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA corpusmill TO {}").format(sql.Identifier(ROLE)))
    return pg_url.replace("postgres:@", f"{ROLE}:@", 1)


def test_search_and_status_run_as_a_role_that_may_only_select(reader_url, capsys):
    # The role really cannot write.
    with psycopg.connect(reader_url) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute("CREATE TABLE corpusmill.nope (x int)")
    rc = main(["search", "--collection", NAME, "--database-url", reader_url, "--json", "-k", "2",
               "how does a rolling update add pods"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    hits = json.loads(out.out.splitlines()[-1])["hits"]
    # Hybrid for real: BM25 ranked them too (a read that could not run BM25 would fall back to vectors).
    assert hits[0]["source_path"] == "rollout.md" and any(h["bm25"] is not None for h in hits)
    assert main(["status", "--collection", NAME, "--database-url", reader_url]) == 0
    assert f"{NAME}:" in capsys.readouterr().out


def test_serve_runs_as_a_role_that_may_only_select(reader_url):
    coll = serving.open_collection(NAME, reader_url, pool=2)
    with coll, serving.running(coll) as port:
        status, body = serving.get(port, "/search?q=readiness+probe&k=2&filter=tags%3Dops")
        assert status == 200 and body["hits"][0]["source_path"] == "probes.md"
        assert serving.get(port, "/search?q=pods&mode=text")[0] == 200
        # hybrid-doc's document vectors are not built: a 409 naming the command that builds them, no table made
        status, body = serving.get(port, "/search?q=pods&mode=hybrid-doc")
        assert status == 409 and "corpusmill upgrade --doc-vectors" in body["detail"]
        status, body = serving.get(port, "/collection")
        assert status == 200 and body["collection"] == NAME


def test_hybrid_doc_is_built_by_upgrade_not_by_a_search(pg_url, reader_url, capsys):
    with PgStore(pg_url) as store:
        table = store.get_collection(NAME).chunk_table
        assert not doc_vectors.exists(store.conn, store.schema, table)
    assert main(["search", "--collection", NAME, "--database-url", pg_url, "--mode", "hybrid-doc", "pods"]) == 2
    assert "corpusmill upgrade --doc-vectors" in capsys.readouterr().err
    with PgStore(pg_url) as store:
        assert not doc_vectors.exists(store.conn, store.schema, table)  # the search, even as the owner, built nothing
    assert main(["upgrade", "--collection", NAME, "--doc-vectors", "--database-url", pg_url]) == 0
    assert "document vectors up to date (3 embedded now)" in capsys.readouterr().out
    with psycopg.connect(pg_url, autocommit=True) as conn:  # the new table, readable by the reader as any other
        conn.execute(sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA corpusmill TO {}").format(sql.Identifier(ROLE)))
    assert main(["search", "--collection", NAME, "--database-url", reader_url, "--mode", "hybrid-doc", "--json",
                 "how do I take a snapshot"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["hits"][0]["source_path"] == "backup.md"


def test_a_schema_behind_this_corpusmill_is_named_with_the_command_that_upgrades_it(pg_url, tmp_path, capsys):
    schema = "cm_behind_t"
    with PgStore(pg_url, schema) as store:
        store.migrate()
        serving.build(store, "behind")
        # As if the database had missed a migration this corpusmill ships (one that can run again).
        store.conn.execute(sql.SQL("DELETE FROM {} WHERE version = %s").format(
            sql.Identifier(schema, "schema_migrations")), (MISSED,))
    config = tmp_path / "c.yaml"
    config.write_text(f"collection: behind\ndatabase:\n  schema: {schema}\n", encoding="utf-8")
    with pytest.raises(SchemaOutdated, match="corpusmill upgrade"):
        serving.open_collection("behind", pg_url, schema=schema)
    for command in (["search", "pods"], ["status"]):
        assert main([*command, "--config", str(config), "--database-url", pg_url]) == 2
        err = capsys.readouterr().err
        assert "corpusmill upgrade" in err and len(err.strip().splitlines()) == 1
    assert main(["upgrade", "--config", str(config), "--database-url", pg_url]) == 0
    assert f"applied {MISSED}" in capsys.readouterr().out
    assert main(["search", "--config", str(config), "--database-url", pg_url, "pods"]) == 0


def _notes(tmp_path):
    root = tmp_path / "notes"
    root.mkdir()
    for i in range(3):
        (root / f"n{i}.md").write_text(f"# Note {i}\n\nText of note {i}.\n", encoding="utf-8")
    return root


def test_plan_writes_nothing_not_even_the_schema_and_runs_as_a_reader(pg_url, reader_url, tmp_path, capsys):
    root, schema = _notes(tmp_path), "cm_plan_fresh_t"
    config = tmp_path / "c.yaml"
    config.write_text(f"collection: planned\ndatabase:\n  schema: {schema}\n", encoding="utf-8")
    assert main(["plan", "--config", str(config), "--database-url", pg_url, "--input", str(root)]) == 0
    assert capsys.readouterr().out.startswith("3 add, 0 update")
    with psycopg.connect(pg_url) as conn:  # a database nothing was ingested into stays without corpusmill's schema
        assert conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone() is None
    assert main(["plan", "--collection", NAME, "--database-url", reader_url, "--input", str(root), "--json"]) == 0
    planned = json.loads(capsys.readouterr().out)
    assert (planned["add"], planned["delete"]) == (3, 3)  # the collection's three documents are not in this input


def test_plan_against_a_schema_behind_this_corpusmill_names_the_upgrade_and_changes_nothing(pg_url, tmp_path, capsys):
    schema = "cm_plan_behind_t"
    with PgStore(pg_url, schema) as store:
        store.migrate()
        store.conn.execute(sql.SQL("DELETE FROM {} WHERE version = %s").format(
            sql.Identifier(schema, "schema_migrations")), (MISSED,))
    config = tmp_path / "c.yaml"
    config.write_text(f"collection: behind\ndatabase:\n  schema: {schema}\n", encoding="utf-8")
    assert main(["plan", "--config", str(config), "--database-url", pg_url, "--input", str(_notes(tmp_path))]) == 2
    err = capsys.readouterr().err
    assert "corpusmill upgrade" in err and "then plan again" in err and len(err.strip().splitlines()) == 1
    with psycopg.connect(pg_url) as conn:
        assert not conn.execute(sql.SQL("SELECT 1 FROM {} WHERE version = %s").format(
            sql.Identifier(schema, "schema_migrations")), (MISSED,)).fetchone()
