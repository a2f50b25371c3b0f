"""The Python API's Collection (jobs/api.py) on the embedded PostgreSQL and the packaged model: what it
raises for arguments of the wrong type and for a statement past the timeout, as docs/api.md says."""

from __future__ import annotations

import psycopg
import pytest
from psycopg import sql

from jobs.search.limits import SearchTimeout
from jobs.store.pgvector import PgStore
from tests import serving

NAME = "api_t"


@pytest.fixture(scope="module")
def built(pg_url):
    return serving.built(pg_url, NAME)


def test_arguments_of_the_wrong_type_are_refused_before_any_search(built):
    with serving.open_collection(NAME, built, pool=1) as coll:
        with pytest.raises(TypeError, match="not one string"):
            coll.search_many("rolling update", k=1)  # not four one-letter queries
        for k in ("5", 2.5, True):
            with pytest.raises(TypeError, match="k must be an int"):
                coll.search("pods", k=k)
        with pytest.raises(TypeError, match="min_similarity must be a number"):
            coll.search("pods", min_similarity="0.5")
        assert [h.source_path for h in coll.search_many(["readiness probe"], k=1)[0]] == ["probes.md"]


def test_search_many_is_bounded_in_queries(built):
    from jobs.search.limits import MAX_QUERIES, LimitError

    refused = f"{MAX_QUERIES + 1} queries in one call; the limit is {MAX_QUERIES}"
    with serving.open_collection(NAME, built, pool=1) as coll, pytest.raises(LimitError, match=refused):
        coll.search_many(["pods"] * (MAX_QUERIES + 1), k=1)


def test_a_statement_past_the_timeout_raises_search_timeout_from_search_and_metadata_keys(built):
    with PgStore(built) as store:
        table = store.get_collection(NAME).chunk_table
    with serving.open_collection(NAME, built, pool=1, timeout_s=0.5) as coll:
        coll.warm()
        with psycopg.connect(built) as holder:  # a writer holding the table: every read of it waits
            holder.execute(sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(sql.Identifier("corpusmill", table)))
            with pytest.raises(SearchTimeout, match="statement timeout"):
                coll.search("pods")
            with pytest.raises(SearchTimeout, match="reading the metadata keys ran past the statement timeout"):
                coll.metadata_keys()
