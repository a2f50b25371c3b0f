"""The one glob dialect of corpusmill: input include/exclude globs, row-template `file`/`sheet` globs,
`excel.header_rows` pins and search's `path=` filters all match with it (the filters in the database,
through postgres_regex).

Patterns match relative POSIX paths: `*` and `?` stay within one path segment, `**` is any number of
directories (none included), `[…]` is a character class (`[!…]` negated), `{a,b}` is either, and a
leading dot is matched like any other character (hidden files are excluded by the default exclude
globs, not by the dialect). Python's fnmatch lets `*` cross `/` and has no `**` or braces, and
pathlib's match has no `**` before 3.13: wcmatch gives all of this, compiled once per pattern list.

Case: input include/exclude globs match with `ignore_case` (jobs/sources/discover.py), so `**/*.md`
finds `NOTES.MD` on every filesystem and in every object store, as it would on Windows or macOS.
Row-template `file` globs, header pins' `file` and search's `path=` match the case as written (a
template's and a pin's `sheet` globs ignore case: jobs/excel/templates.py).
"""

from __future__ import annotations

import re
from functools import lru_cache

from wcmatch import glob
from wcmatch._wcparse import PatternLimitException  # what translate raises past `limit`; no public name

FLAGS = glob.GLOBSTAR | glob.BRACE | glob.DOTGLOB | glob.FORCEUNIX


@lru_cache(maxsize=256)
def _compiled(patterns: tuple[str, ...], ignore_case: bool = False) -> re.Pattern[str] | None:
    # One alternation of wcmatch's translated regexes: discovery matches every path of the corpus, and
    # this takes ~7.6 us per path against three include and three exclude globs, wcmatch's own matcher
    # ~10 us (measured side by side on 100k paths).
    regexes, _ = glob.translate(list(patterns), flags=FLAGS | (glob.IGNORECASE if ignore_case else 0))
    return re.compile("|".join(f"(?:{r})" for r in regexes)) if regexes else None


def check_globs(patterns: list[str] | tuple[str, ...], what: str) -> None:
    """Raise ValueError naming `what` when a pattern cannot be compiled (a brace expansion past
    wcmatch's limit, say), so a config is refused when it is read rather than mid-run."""
    try:
        _compiled(tuple(patterns))
    except Exception as exc:  # wcmatch raises its own PatternLimitException or a ValueError
        raise ValueError(f"{what}: {exc}") from exc


def matches(rel_path: str, patterns: list[str] | tuple[str, ...], *, ignore_case: bool = False) -> bool:
    """True when the whole of `rel_path` matches any of `patterns` (a trailing `/` or newline does not);
    `ignore_case`: letters match in either case (`**/*.md` takes `NOTES.MD`), as input globs do."""
    compiled = _compiled(tuple(patterns), ignore_case)
    return compiled is not None and compiled.fullmatch(rel_path) is not None and not rel_path.endswith(("/", "\n"))


class GlobError(ValueError):
    """A glob that cannot become a database filter (too many brace alternatives, say)."""


def postgres_regex(pattern: str, limit: int = 64) -> str:
    """`pattern` as one anchored PostgreSQL regular expression with this module's meaning, for a filter
    the database applies to stored paths: wcmatch's own translation (one regex per brace alternative, at
    most `limit`), each `^(?s:…)$` made a plain group, since PostgreSQL's flavour has no inline flag
    groups and its `.` matches a newline anyway; lookarounds and lazy quantifiers it shares. A `%` is
    written `\\u0025` (`\\x25b` would read as one hex number): these regexes go into queries that also
    take psycopg parameters."""
    try:
        regexes, _ = glob.translate([pattern], flags=FLAGS, limit=limit)
    except (PatternLimitException, ValueError) as exc:  # too many alternatives; a pattern it refuses
        raise GlobError(f"glob {pattern[:40]!r}: {exc}") from exc
    groups = []
    for regex in regexes:
        if not (regex.startswith("^(?s:") and regex.endswith(")$")):  # a wcmatch release that writes otherwise
            raise GlobError(f"glob {pattern[:40]!r}: unexpected translation {regex!r}")
        # An atomic group (wcmatch's guard against backtracking in Python's engine) is a plain group in
        # PostgreSQL's, which does not backtrack into one: a literal `(` is always escaped, so this finds
        # only the construct.
        groups.append("(?:" + regex[len("^(?s:"):-len(")$")].replace("(?>", "(?:") + ")")
    return ("^(?:" + "|".join(groups) + ")$").replace("%", "\\u0025")
