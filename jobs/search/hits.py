"""What a search hit carries besides its rank: where the chunk is (path, heading path, character span,
sheet and row), the document's metadata, its cosine similarity to the query, and the passage that
matched (PostgreSQL's ts_headline over the chunk, the query's words marked).

The passage comes from the database's own text-search engine rather than code of ours, for the shown
hits only: its `english` configuration stems with the same Snowball stemmer and drops the same stop
words as the chunks' terms (jobs/terms.py), so what it marks is what BM25 matched (an identifier's
parts; its whole, which PostgreSQL's parser splits, is marked by its parts).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import numpy as np
from psycopg import sql

if TYPE_CHECKING:  # annotations only: the store is handed in
    from jobs.store.pgvector import PgStore
    from jobs.store.spaces import Collection

TEXT_CONFIG = "english"  # PostgreSQL's text-search configuration of the passages
# ts_headline marks matches with these (private-use characters no chunk text holds once stored); they
# become offsets in `highlights`, so no markup is put into the text a client shows.
_OPEN, _CLOSE = "\ue000", "\ue001"
HEADLINE = (f"StartSel={_OPEN}, StopSel={_CLOSE}, MaxWords=40, MinWords=18, ShortWord=2, "
            "MaxFragments=2, FragmentDelimiter=\" … \"")

_FIELDS = """
SELECT chunk_id, doc_id, source_path, source_type, heading_path, text, char_start, char_end, sheet, "row",
       metadata, 1 - (embedding <=> %(v)s) AS cosine
FROM {t} WHERE chunk_id = ANY(%(ids)s)"""
# Any of the query's words: a passage that holds some of them is the one to show.
_HEADLINES = """
SELECT chunk_id, ts_headline({config}, text, replace(plainto_tsquery({config}, %(q)s)::text, ' & ', ' | ')::tsquery,
                             {options})
FROM {t} WHERE chunk_id = ANY(%(ids)s)"""
_HITS = "SELECT chunk_id, source_path, heading_path, text FROM {t} WHERE chunk_id = ANY(%(ids)s)"


def snippet(headline: str) -> tuple[str, list[list[int]]]:
    """ts_headline's text with whitespace collapsed and its marks as [start, end) offsets into that text."""
    text = re.sub(r"\s+", " ", headline).strip()
    out, spans, start = [], [], None
    for ch in text:
        if ch == _OPEN:
            start = sum(map(len, out))
        elif ch == _CLOSE:
            if start is not None:
                spans.append([start, sum(map(len, out))])
            start = None
        else:
            out.append(ch)
    return "".join(out), spans


def fetch(conn, table: sql.Composable, ids: list[str], vector) -> dict[str, dict]:
    """chunk id -> the hit's fields but its passage, for `ids` (in one query)."""
    if not ids:
        return {}
    rows = conn.execute(sql.SQL(_FIELDS).format(t=table), {"ids": list(ids), "v": np.asarray(vector, dtype=np.float32)})
    return {chunk: {"chunk_id": chunk, "doc_id": doc, "source_path": path, "source_type": kind,
                    "heading_path": list(heading or []), "text": text, "snippet": None, "highlights": [],
                    "char_start": start, "char_end": end, "sheet": sheet, "row": row, "metadata": metadata or {},
                    "cosine": None if cosine is None else round(float(cosine), 6)}
            for (chunk, doc, path, kind, heading, text, start, end, sheet, row, metadata, cosine) in rows}


def hit_fields(conn, table: sql.Composed, ids: list[str]) -> dict[str, dict]:
    """chunk id -> what a hit carries besides its score (source path, heading path, text), for `ids`."""
    return {r[0]: {"chunk_id": r[0], "source_path": r[1], "heading_path": list(r[2] or []), "text": r[3]}
            for r in conn.execute(sql.SQL(_HITS).format(t=table), {"ids": list(ids)})}


def add_passages(store: PgStore, coll: Collection, found: list[dict], query: str) -> list[dict]:
    """`found` (hits of jobs/search/ranking.py's search_many) with the passage of each that matched `query`
    (passages), run again on a fresh connection if the server restarts under it (PgStore.read)."""
    table = sql.Identifier(store.schema, coll.chunk_table)
    return store.read(lambda s: passages(s.conn, table, found, query, TEXT_CONFIG))


def passages(conn, table: sql.Composable, hits: list[dict], query: str | None, config: str) -> list[dict]:
    """`hits` with `snippet` and `highlights` set: the passage of each that matches `query`. Done for the
    hits shown only (a headline reads the whole chunk), not for every candidate a ranking weighed."""
    if not hits:
        return hits
    stmt = sql.SQL(_HEADLINES).format(t=table, config=sql.Literal(config), options=sql.Literal(HEADLINE))
    lines = dict(conn.execute(stmt, {"ids": [h["chunk_id"] for h in hits], "q": query or ""}).fetchall())
    out = []
    for h in hits:
        passage, marks = snippet(lines.get(h["chunk_id"]) or h["text"] or "")
        out.append(dict(h, snippet=passage, highlights=marks))
    return out
