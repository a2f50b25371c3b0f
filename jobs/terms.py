"""The lexical side of a chunk and of a query: its terms, their frequencies and its length, for BM25.

One function, `analyse`, serves both sides: the chunk-row builder (jobs/chunks/build.py) runs it on the
Ray workers, where it scales with them, and the search (jobs/search/bm25.py) runs it on each
query, so a query word and a chunk word meet as the same term whatever their inflection and case. The
database receives the result as plain columns and never analyses text on the write path.

What a term is:

- Words are lowercased, English stop words dropped (PostgreSQL's `english` list, below), and stemmed by
  PyStemmer's Snowball English stemmer: the Porter2 algorithm PostgreSQL's `english` text-search
  configuration uses (`english_stem`), from its C implementation, so stems match what `to_tsvector`
  gave and what `ts_headline` (passages, jobs/search/hits.py) marks.
- An identifier (`max_locks_per_transaction`, `camelCase`, `foo-bar`, `v1.2.3`, `hugo.toml`) yields the
  whole token, lowercased and unstemmed, and each of its parts as a word: a chunk that names it is found
  by a query for the exact name and by one for its words. PostgreSQL's parser splits
  `max_locks_per_transaction` into four words and keeps no whole, so an option's name ranked no higher
  than prose that uses its words.
- In a query, an identifier is the name only (its whole term): whoever types `PSVersionTable` or
  `Get-ChildItem` means that name, and its parts as words of their own (`version`, `table`, `item`)
  ranked every page that uses those words beside the ones that name it (PowerShell's dev set lost page
  hit@1 to it; docs/benchmarks.md, Retrieval). Words typed as words find the parts as before.
- A path or link target (`/dotnet/api/system.management.automation.powershell`, `../includes/a.md`,
  `and/or`: word characters, `.`, `~`, `-` runs joined by `/`) is one term, whole and lowercased, as
  PostgreSQL's `file` token was: the words of the links a page carries are not its words.
- Numbers are kept as they are.

A term's id is a stable hash of it (BLAKE2b, never Python's salted `hash()`) into 1 .. 10^9, pgvector's
largest sparsevec dimension: the chunk table stores ids, the BM25 weights are a sparse vector over them.
Two terms that collide only merge their counts.

A chunk's length (BM25's dl) is its number of distinct terms, as PostgreSQL's `length(tsvector)` counted
it for the BM25 this replaced: a chunk that repeats its words (a code block, a table of one column's
values) is not made long by the repeats, and on every dev set this ranked at least as well as counting
every term, better on PowerShell's and openshift-docs' pages (docs/benchmarks.md, Retrieval).

TERMS_VERSION names what `analyse` makes. A chunk table records the version its terms were made by
(jobs/store/lexical.py) and a Parquet part carries it in its metadata (jobs/store/parquet.py): a table or
part of another version is analysed again on the write side (its next ingest, load or reembed), since a
query analysed by this code finds terms only where the chunks were analysed alike.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter

import numpy as np
import Stemmer

DIMENSION = 1_000_000_000  # term ids are 1 .. DIMENSION (pgvector's sparsevec allows no more)
# 1: a chunk's length counted every term; 2: its distinct terms.
TERMS_VERSION = 2

# PostgreSQL's share/tsearch_data/english.stop (itself Snowball's English stop list), under the PostgreSQL
# licence (a BSD-style licence: "Permission to use, copy, modify, and distribute this software … is
# hereby granted, provided that the above copyright notice and this paragraph … appear in all copies";
# Portions Copyright (c) 1996-2025, PostgreSQL Global Development Group; Snowball: BSD, Martin Porter
# and Richard Boulton). Kept word for word, so stop words behave as they did under `to_tsvector`.
STOP_WORDS = frozenset("""
i me my myself we our ours ourselves you your yours yourself yourselves he him his himself she her hers
herself it its itself they them their theirs themselves what which who whom this that these those am is
are was were be been being have has had having do does did doing a an the and but if or because as until
while of at by for with about against between into through during before after above below to from up
down in out on off over under again further then once here there when where why how all any both each
few more most other some such no nor not only own same so than too very s t can will just don should now
""".split())

# A token: word characters, possibly joined by `.`, `-` or `_` into an identifier (a joiner must sit
# between word characters, so a sentence's full stop or a dash between words is not one).
_TOKEN = re.compile(r"[^\W_]+(?:[._-]+[^\W_]+)*")
_JOINERS = re.compile(r"[._-]+")
_PATH = re.compile(r"(?:[\w.~-]*/)+[\w.~-]*\w")
# camelCase and PascalCase boundaries: `camelCase` -> camel|Case, `HTTPServer` -> HTTP|Server.
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")

_stemmer = Stemmer.Stemmer("english")
_CACHE_LIMIT = 200_000  # tokens whose terms are remembered (a corpus' vocabulary is mostly far smaller)
_tokens: dict[str, tuple[int, ...]] = {}


def term_id(term: str) -> int:
    """The term's dimension, 1 .. DIMENSION: a stable hash, the same in every process and release."""
    digest = hashlib.blake2b(term.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little") % DIMENSION + 1


def _word(word: str) -> list[str]:
    """A plain word's term: lowercased and stemmed, none for a stop word."""
    word = word.lower()
    if word in STOP_WORDS:
        return []
    return [_stemmer.stemWord(word)]


def token_terms(token: str) -> list[str]:
    """The terms of one token (as `_TOKEN` finds it): a plain word gives its stem, an identifier its whole
    lowercased form and the stems of its parts."""
    parts = [p for piece in _JOINERS.split(token) for p in _CAMEL.split(piece) if p]
    if len(parts) == 1:
        return _word(token)
    joined = _JOINERS.search(token) is not None
    # A camelCase word with no joiner is still a word: its whole is stemmed like one (`DataFrames`
    # meets `dataframe`); an identifier with joiners is a name, kept as written.
    whole = token.lower() if joined else _stemmer.stemWord(token.lower())
    return [whole] + [t for p in parts for t in _word(p)]


def _ids(token: str) -> tuple[int, ...]:
    found = _tokens.get(token)
    if found is None:
        if len(_tokens) >= _CACHE_LIMIT:
            _tokens.clear()
        found = _tokens[token] = tuple(term_id(t) for t in token_terms(token))
    return found


def analyse(text: str | None, query: bool = False) -> tuple[list[int], list[int], int]:
    """(sorted distinct term ids, each one's frequency, the length: the number of distinct terms) of
    `text`; `query`: an identifier gives its whole term only (the module's rules)."""
    counts: Counter[int] = Counter()
    text = text or ""
    for path in _PATH.findall(text):
        counts[term_id(path.lower())] += 1
    for token in _TOKEN.findall(_PATH.sub(" ", text)):
        ids = _ids(token)
        counts.update(ids[:1] if query else ids)
    ids = sorted(counts)
    return ids, [counts[i] for i in ids], len(ids)


def chunk_text(breadcrumb: str | None, text: str | None) -> str:
    """What a chunk's terms come from: its breadcrumb and its text (as the full-text column had it)."""
    return f"{breadcrumb or ''} {text or ''}"


def analyse_chunk(breadcrumb: str | None, text: str | None) -> dict:
    """A chunk row's lexical columns (jobs/rows.py: lex_terms, lex_tfs, lex_length)."""
    ids, tfs, length = analyse(chunk_text(breadcrumb, text))
    return {"lex_terms": ids, "lex_tfs": tfs, "lex_length": length}


def query_terms(query: str) -> list[int]:
    """A query's distinct term ids: what BM25 weighs it by (a repeated query word counts once; an
    identifier is its whole name)."""
    return analyse(query, query=True)[0]


K1, B = 1.2, 0.75  # BM25's (Robertson's) constants, the document side's and exact BM25's
MAX_DIMS = 1000  # the heaviest weights a document keeps: pgvector's HNSW index takes no more non-zeros


def bm25_weights(tfs: np.ndarray, length: float, pivot: float) -> np.ndarray:
    """BM25 document weights tf (k1 + 1) / (tf + k1 (1 - b + b dl / pivot)) of one chunk's terms."""
    tfs = np.asarray(tfs, dtype=np.float64)
    return tfs * (K1 + 1) / (tfs + K1 * (1 - B + B * length / max(pivot, 1.0)))
