"""The bounds of one search request: what `search`, the API and `serve` accept.

A service in front of a team meets requests that are hostile or merely careless: a pasted page as the
query, a thousand filters, a glob of five thousand stars. Each would reach PostgreSQL as a query that
takes seconds or fails inside the server; bounded here, it is refused first with the limit it passed
(LimitError, a ConfigError: exit 2 from the CLI, 422 from the service).

The query's bound sits above what the embedder reads (MiniLM reads 256 word pieces, about 1,000
characters of English): a longer query adds nothing to its vector and only widens its BM25 scan.
"""

from __future__ import annotations

from dataclasses import dataclass

from jobs.errors import ConfigError, UserError
from jobs.search.filters import PATH_KEY

MAX_QUERY_CHARS = 2000
MAX_K = 100
MAX_FILTERS = 10  # filters in one request (all must hold)
MAX_FILTER_VALUES = 20  # values of one filter (KEY=V1,V2,...: any of them)
MAX_VALUE_CHARS = 200  # a filter's key, or one of its values or path globs
MAX_WILDCARDS = 10  # `*` and `?` in one path glob (a run of `*` counts once)
MAX_QUERIES = 256  # queries in one call of the API's search_many: encoded together, held in memory together


class LimitError(ConfigError):
    """A request beyond one of the limits above, or text PostgreSQL cannot hold: the message says which."""


class SearchTimeout(UserError, TimeoutError):
    """A search statement ran past the statement timeout (database.statement_timeout_s) and was stopped."""


@dataclass(frozen=True)
class Limits:
    query_chars: int = MAX_QUERY_CHARS
    k: int = MAX_K
    filters: int = MAX_FILTERS
    filter_values: int = MAX_FILTER_VALUES
    value_chars: int = MAX_VALUE_CHARS
    wildcards: int = MAX_WILDCARDS
    queries: int = MAX_QUERIES

    def to_dict(self) -> dict:
        return {"max_query_chars": self.query_chars, "max_k": self.k, "max_filters": self.filters,
                "max_filter_values": self.filter_values, "max_filter_value_chars": self.value_chars,
                "max_glob_wildcards": self.wildcards, "max_queries": self.queries}


DEFAULT = Limits()


def check_text(what: str, text: str, most: int) -> None:
    """`text` must be non-empty, at most `most` characters, and storable: no NUL, valid Unicode."""
    if not isinstance(text, str):
        raise LimitError(f"{what} must be text, got {type(text).__name__}")
    if not text.strip():
        raise LimitError(f"{what} is empty")
    if len(text) > most:
        raise LimitError(f"{what} is {len(text):,} characters long; the limit is {most:,}")
    if "\x00" in text:
        raise LimitError(f"{what} contains a NUL character, which PostgreSQL text cannot hold")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:  # a lone surrogate, from a JSON \ud800 or a file read with surrogateescape
        raise LimitError(f"{what} is not valid Unicode ({exc.reason} at character {exc.start})") from exc


def wildcards(glob: str) -> int:
    """`*` and `?` in a glob, a run of `*` counted once (jobs/search/filters.py folds it into one)."""
    n, prev = 0, ""
    for ch in glob:
        if ch == "?" or (ch == "*" and prev != "*"):
            n += 1
        prev = ch
    return n


def check_request(queries: list[str], k: int, filters, limits: Limits = DEFAULT) -> None:
    """Raise LimitError naming the first limit the request passes. `filters`: jobs.search.filters.Filter."""
    if not 1 <= k <= limits.k:
        raise LimitError(f"k must be 1 to {limits.k} (got {k})")
    if len(queries) > limits.queries:
        raise LimitError(f"{len(queries)} queries in one call; the limit is {limits.queries}: search them in batches")
    for i, q in enumerate(queries):
        check_text("the query" if len(queries) == 1 else f"query {i + 1}", q, limits.query_chars)
    if len(filters) > limits.filters:
        raise LimitError(f"{len(filters)} filters; the limit is {limits.filters} (KEY=V1,V2 matches any of "
                         "several values in one filter)")
    for f in filters:
        check_text("a filter's key", f.key, limits.value_chars)
        if len(f.values) > limits.filter_values:
            raise LimitError(f"filter {f.key!r} has {len(f.values)} values; the limit is {limits.filter_values}")
        for v in f.values:
            check_text(f"a value of filter {f.key!r}", v, limits.value_chars)
            if f.key == PATH_KEY and wildcards(v) > limits.wildcards:
                raise LimitError(f"path glob {v[:40]!r}{'…' * (len(v) > 40)} has {wildcards(v)} wildcards; "
                                 f"the limit is {limits.wildcards}")
