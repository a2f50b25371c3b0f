"""jobs/terms.py: the one analyser of chunks and queries (stems, stop words, case, identifiers, ids)."""

import subprocess
import sys

import numpy as np
import pytest

from jobs import terms
from jobs.terms import DIMENSION, analyse, analyse_chunk, bm25_weights, query_terms, term_id, token_terms


def _terms(text: str) -> set[str]:
    return {t for token in terms._TOKEN.findall(text) for t in token_terms(token)}


def test_a_word_in_another_inflection_is_the_same_term():
    assert query_terms("configuring") == query_terms("configured") == query_terms("configure")
    assert set(query_terms("servers")) == set(query_terms("server"))
    assert set(query_terms("Running")) == set(query_terms("runs"))


def test_stop_words_and_case_behave_alike_in_a_chunk_and_in_a_query():
    ids, tfs, length = analyse("The Server and THE servers")
    assert ids == query_terms("server") and tfs == [2] and length == 1  # `the`, `and` dropped; case folded
    assert query_terms("the and of") == []
    assert analyse_chunk("Guide › Setup", "the servers")["lex_terms"] == sorted(
        set(query_terms("guide setup server")))


@pytest.mark.parametrize(("token", "whole", "parts"), [
    ("max_locks_per_transaction", "max_locks_per_transaction", {"max", "lock", "per", "transact"}),
    ("foo-bar", "foo-bar", {"foo", "bar"}),
    ("v1.2.3", "v1.2.3", {"v1", "2", "3"}),
    ("hugo.toml", "hugo.toml", {"hugo", "toml"}),
    ("camelCase", "camelcas", {"camel", "case"}),  # a word without joiners: its whole is stemmed too
    ("HTTPServer", "httpserver", {"http", "server"}),
    ("Get-ChildItem", "get-childitem", {"get", "child", "item"}),
])
def test_an_identifier_yields_its_whole_and_its_parts(token, whole, parts):
    found = token_terms(token)
    assert found[0] == whole and set(found[1:]) == parts


@pytest.mark.parametrize(("query", "words"), [("PSVersionTable", "ps version table"),
                                              ("Get-ChildItem", "get child item"),
                                              ("max_locks_per_transaction", "max locks per transaction")])
def test_a_query_identifier_is_its_name_and_words_typed_as_words_find_its_parts(query, words):
    named = set(analyse(f"Run {query} first")[0])
    assert query_terms(query) == [term_id(token_terms(query)[0])]  # the name, not `version` or `item`
    assert set(query_terms(query)) <= named and set(query_terms(words)) <= named


def test_an_identifier_is_found_by_its_name_and_by_its_words():
    chunk = set(analyse("Raise max_locks_per_transaction in postgresql.conf")[0])
    assert set(query_terms("max_locks_per_transaction")) <= chunk
    assert set(query_terms("locks per transaction")) <= chunk
    prose = set(analyse("the locks held per transaction")[0])
    assert not set(query_terms("max_locks_per_transaction")) <= prose  # the whole name is only where it is written


def test_numbers_are_kept_and_a_sentence_end_is_no_joiner():
    assert _terms("Port 8080. Then 3.14") == {"port", "8080", "3.14", "3", "14"}
    assert _terms("a — b - c") == {"b", "c"}


def test_term_ids_are_stable_across_processes_and_in_range():
    here = [term_id(t) for t in ("server", "max_locks_per_transaction", "日本語")]
    there = subprocess.run([sys.executable, "-c", "from jobs.terms import term_id; print([term_id(t) for t in "
                            "('server', 'max_locks_per_transaction', '日本語')])"],
                           capture_output=True, text=True, check=True, env={"PYTHONHASHSEED": "7"}).stdout
    assert str(here) == there.strip()
    assert all(1 <= i <= DIMENSION for i in here)


def test_terms_are_sorted_and_distinct_with_their_counts_and_the_length_counts_each_once():
    ids, tfs, length = analyse("lock locks locking unlock")
    assert ids == sorted(set(ids)) and sorted(tfs) == [1, 3] and length == len(ids) == 2
    assert analyse("select select select select from t")[2] == analyse("select from t")[2]  # repeats add no length


def test_bm25_weights_follow_the_formula():
    w = bm25_weights(np.array([1, 3]), 20, 10)
    k = 1.2 * (1 - 0.75 + 0.75 * 2)
    assert w == pytest.approx([2.2 / (1 + k), 3 * 2.2 / (3 + k)])


def test_a_path_is_one_term_and_its_words_are_not_the_chunks():
    ids = set(analyse("See [Get-Item](/dotnet/api/system.management.automation.powershell) and ../includes/a.md.")[0])
    assert {term_id("/dotnet/api/system.management.automation.powershell"), term_id("../includes/a.md")} <= ids
    assert not set(query_terms("management automation includes")) & ids  # a link's words are not the chunk's
    assert set(query_terms("Get-Item")) <= ids
    assert query_terms("and/or") == [term_id("and/or")]
