"""How commands show things to a person: search hits (the matching words in bold on a terminal), the
filter keys a search named that no document carries, and where the data lives."""

from __future__ import annotations

import os
import sys

from jobs.errors import UserError
from jobs.home import home, pgdata_dir


def where_data_lives(cfg) -> str:
    """One line: the home, and which database (a configured server is named without its password)."""
    if cfg.database.url is None:
        db = f"embedded PostgreSQL in {pgdata_dir()}"
    else:
        from psycopg.conninfo import conninfo_to_dict  # late: only for a configured server

        info = conninfo_to_dict(cfg.database.url.get_secret_value())
        db = f"PostgreSQL {info.get('user', '')}@{info.get('host', 'localhost')}/{info.get('dbname', '')}"
    source = "CORPUSMILL_HOME" if os.environ.get("CORPUSMILL_HOME") else "the default; CORPUSMILL_HOME moves it"
    return f"data: {home()} ({source}) · database: {db} · runs: {cfg.output or home() / 'runs'}"


def _marked(text: str, spans: list[list[int]], on: bool) -> str:
    """`text` with the query's words in bold on a terminal (ANSI), as they are elsewhere."""
    if not on or not spans:
        return text
    out, at = [], 0
    for a, b in spans:
        out += [text[at:a], "\033[1m", text[a:b], "\033[0m"]
        at = b
    return "".join(out) + text[at:]


def print_hits(query: str, hits, tty: bool) -> None:
    print(f"\n? {query}")
    if not hits:
        print("   no hits" + " (none passed the filters or --min-similarity)")
    for h in hits:
        crumb = " › ".join(h.heading_path)
        where = f" · {h.sheet} row {h.row}" if h.sheet else ""
        parts = [f"cosine {h.cosine:.3f}" if h.cosine is not None else "", f"bm25 {h.bm25:.2f}" if h.bm25 else ""]
        print(f"{h.rank:2}. {h.score:.3f}  {h.source_path}{where}  [{crumb}]  ({' · '.join(p for p in parts if p)})")
        print(f"      {_marked(h.snippet, h.highlights, tty)}")


KEY_SAMPLE_ROWS = 20_000  # chunks read for the metadata keys a collection has


def tell_unknown_filter_keys(coll, filters: list[str]) -> None:
    """After a search that found nothing under --filter: name the filter keys no document of the
    collection carries (a typo's silent "no hits"), with the keys it has."""
    from jobs.search.filters import PATH_KEY  # late: only after a filtered search found nothing

    asked = [f.split("=", 1)[0].strip() for f in filters]
    try:  # a sample, as `serve` reads them: a note must not cost a scan of a large collection
        known = coll.metadata_keys(limit=10_000, sample_rows=KEY_SAMPLE_ROWS)
    except UserError:  # the statement timeout: no note rather than an error after the answer
        return
    unknown = [k for k in dict.fromkeys(asked) if k != PATH_KEY and k not in known]
    if unknown:
        print(f"note: metadata key {', '.join(map(repr, unknown))} is not among those of collection {coll.name}'s "
              f"documents (keys: {', '.join(known[:20]) or 'none'}{', …' if len(known) > 20 else ''}; path= filters "
              "by file)", file=sys.stderr)
