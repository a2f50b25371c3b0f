"""A document's metadata as every one of its chunks carries it: front matter keys of a Markdown file, the
sheet names of a workbook. It is stored as JSON (Parquet `metadata`, the database's `metadata jsonb`) so a
RAG application can filter on it (jobs/search/filters.py) and a hit can show it.

Front matter is the author's, so it is made safe to store and bounded: values become JSON (dates as ISO
text), text loses what PostgreSQL cannot hold (jobs.rows.storable), and a value too large to be a filter
or a label (a whole embedded document, a long list) is left out and named under `_omitted_keys`, so a
header cannot multiply its size into every chunk."""

from __future__ import annotations

import datetime as dt
import json
import math

from jobs.rows import storable

MAX_VALUE_CHARS = 2000  # one key's JSON: a tag list, a date, an author; not a body of text
MAX_TOTAL_CHARS = 16000  # the document's whole metadata, copied into each chunk row


def _plain(value):
    """`value` as JSON can hold it: dates and times as ISO text, text storable, anything else as its text."""
    if isinstance(value, dict):
        return {storable(str(k)): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_plain(v) for v in value]
    if isinstance(value, (dt.date, dt.datetime, dt.time)):
        return value.isoformat()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # JSON has no NaN or infinity
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return storable(str(value))


def metadata_json(meta: dict | None) -> str | None:
    """The JSON text every chunk of a document carries, or None when it has no metadata."""
    if not meta:
        return None
    kept, omitted, total = {}, [], 2
    for key, value in _plain(meta).items():
        text = json.dumps(value, ensure_ascii=False)
        if len(text) > MAX_VALUE_CHARS or total + len(key) + len(text) + 6 > MAX_TOTAL_CHARS:
            omitted.append(key)
            continue
        kept[key] = value
        total += len(key) + len(text) + 6
    if omitted:
        kept["_omitted_keys"] = omitted
    return json.dumps(kept, ensure_ascii=False)


def workbook_metadata(sheets: list[str]) -> str | None:
    """A workbook's facts: the names of its sheets that gave rows, in order."""
    names = list(dict.fromkeys(s for s in sheets if s))
    return metadata_json({"sheets": names}) if names else None
