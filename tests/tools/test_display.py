"""jobs/tools/display.py through `corpusmill search` on a small collection (the embedded PostgreSQL, the
packaged model): a filter key no document carries is named after a search that found nothing."""

from __future__ import annotations

import pytest

from jobs.cli import main
from tests import serving

NAME = "display_t"


@pytest.fixture(scope="module")
def built(pg_url):
    return serving.built(pg_url, NAME)


def test_a_filter_key_no_document_has_is_named_with_the_keys_there_are(built, capsys):
    assert main(["search", "--collection", NAME, "--database-url", built, "--filter", "tgas=ops", "pods"]) == 0
    out = capsys.readouterr()
    assert "no hits" in out.out
    assert f"note: metadata key 'tgas' is not among those of collection {NAME}'s documents (keys: tags;" in out.err
    # A known key that matches nothing, or a path filter, is no typo: nothing is said.
    assert main(["search", "--collection", NAME, "--database-url", built, "--filter", "tags=nothing",
                 "--filter", "path=none/**", "pods"]) == 0
    assert "note:" not in capsys.readouterr().err


def test_a_query_and_a_queries_file_together_are_refused(built, tmp_path, capsys):
    (tmp_path / "q.txt").write_text("pods\n", encoding="utf-8")
    assert main(["search", "--collection", NAME, "--database-url", built, "--queries", str(tmp_path / "q.txt"),
                 "also this"]) == 2
    assert "not both" in capsys.readouterr().err
