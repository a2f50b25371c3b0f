"""Search filters: `KEY=VALUE` (repeatable; all must hold), `KEY=V1,V2` (any of them), `path=GLOB`
(`path=G1,G2`: any of them; a comma inside `{…}` is the glob's own).

A key names a field of the document's metadata (front matter keys; `sheets` for a workbook; see
jobs/chunks/metadata.py). A value matches when the key holds it, or, for a list-valued key (tags), when
the list holds it; values compare as written in the front matter, a number or true/false as such
(`year=2024` matches `year: 2024` and `year: "2024"`). `path` matches the source path in the one glob
dialect of the config's include and exclude globs (jobs/sources/globs.py: `*` and `?` within a folder,
`**` any folders, `[…]`, `{a,b}`), translated for PostgreSQL.

Each metadata test compiles to jsonb containment (`metadata @> '{"tags": ["x"]}'`), which the GIN index
on the column (migration 008) serves and which a vector search's iterative index scan checks per
candidate (jobs/search/vector_index.py), so a selective filter still returns k hits.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from psycopg import sql

from jobs.errors import ConfigError
from jobs.sources import globs

PATH_KEY = "path"


class FilterError(ConfigError):
    """A filter that cannot be read: its text says how to write one."""


@dataclass(frozen=True)
class Filter:
    key: str
    values: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.key}={','.join(self.values)}"


def parse(specs: list[str] | tuple[str, ...] | None) -> list[Filter]:
    """`KEY=VALUE` texts as filters; a FilterError names the one that is not of that form."""
    out = []
    for spec in specs or []:
        key, eq, value = spec.partition("=")
        pieces = _outside_braces(value) if key.strip() == PATH_KEY else value.split(",")
        values = tuple(v.strip() for v in pieces if v.strip())
        if not eq or not key.strip() or not values:
            raise FilterError(f"filter {spec!r}: write KEY=VALUE, KEY=V1,V2 (any of) or path=GLOB")
        if key.strip() == PATH_KEY:
            for glob in values:
                _regex(glob)  # a glob the database cannot take is refused here, before any query
        out.append(Filter(key.strip(), values))
    return out


def _outside_braces(value: str) -> list[str]:
    """`value` split at the commas outside `{…}`: `path=a/*,{b,c}/*.md` is two globs, the second with
    a brace of two alternatives."""
    pieces, depth, start = [], 0, 0
    for i, ch in enumerate(value):
        if ch == "{":
            depth += 1
        elif ch == "}" and depth:
            depth -= 1
        elif ch == "," and not depth:
            pieces.append(value[start:i])
            start = i + 1
    return pieces + [value[start:]]


def _forms(value: str) -> list[object]:
    """The JSON values `value` may stand for: itself as text, and the number or boolean it spells."""
    forms: list[object] = [value]
    low = value.lower()
    if low in ("true", "false"):
        forms.append(low == "true")
    else:
        for kind in (int, float):
            try:
                number = kind(value)
            except ValueError:
                continue
            if math.isfinite(number):  # "inf", "nan", "1e999": text only (JSON has no such numbers)
                forms.append(number)
            break
    return forms


def _regex(pattern: str) -> str:
    try:
        return globs.postgres_regex(pattern)
    except globs.GlobError as exc:
        raise FilterError(f"filter path={pattern[:40]}: {exc}") from exc


# The conditions are composed into queries that also take parameters, where psycopg reads a bare `%` as
# one: no literal here holds one (JSON spells it \u0025, a regular expression \u0025 too).
def _json(doc: dict) -> str:
    return json.dumps(doc, ensure_ascii=False).replace("%", "\\u0025")


def _condition(f: Filter, alias: str) -> sql.Composable:
    if f.key == PATH_KEY:
        column = sql.SQL(f"{alias}source_path")
        return sql.SQL(" OR ").join(sql.SQL("{} ~ {}").format(column, sql.Literal(_regex(v))) for v in f.values)
    column = sql.SQL(f"{alias}metadata")
    tests = []
    for value in f.values:
        for form in _forms(value):
            for doc in ({f.key: form}, {f.key: [form]}):
                tests.append(sql.SQL("{} @> {}::jsonb").format(column, sql.Literal(_json(doc))))
    return sql.SQL(" OR ").join(tests)


def where(filters: list[Filter] | None, alias: str = "") -> sql.Composable | None:
    """The filters as one SQL condition on a chunk table's row (`alias`: e.g. "c." when the query names
    the table so); None when there are none."""
    if not filters:
        return None
    return sql.SQL(" AND ").join(sql.SQL("({})").format(_condition(f, alias)) for f in filters)
