"""corpusmill: notes (Markdown, Excel) into retrieval-ready chunks and vectors."""

__version__ = "0.1.0"

# Part of the pipeline fingerprint. The rule: bump it in the change that alters chunk output for the
# same input and config (text, boundaries, headings, tags, quality labels, token counts), so an
# upgrade re-chunks every stored document on its next run instead of keeping chunks the new code
# would not make. tests/markdown/test_golden.py holds the rule: its goldens' digest is recorded with
# this version in tests/data/golden/VERSION.json, and a digest that changes under the same version
# fails. "2": chunking changed many times under "1" before that test existed. "6": Excel only (header
# lines filled down, series codes and time-series attributes are header, not rows; units into labels; dot
# leaders; unnamed row-header text bare), but the fingerprint is one for every source type. "7": a
# Markdown document that fits the window under its title is one chunk (chunking.whole_documents). "8": a
# window does not end on a lead-in ("…the following command:") whose block follows (jobs/markdown/windows.py).
# "9": a setext heading opens its section's chunk; chunks carry their document's metadata (front matter).
# "10": code and HTML blocks as CommonMark reads them: fences in list items and quotes, indented code
# (jobs/markdown/parse.py). "11": numbers in Text-formatted (@) cells, zero-padded, digit-group (000-00-0000)
# and conditional ([<=9999999]###-####;…) formats shown as the workbook shows them (jobs/excel/formats.py);
# a quote's line over `---` is no setext heading; `---`, a line of text, `---` at the top is no front matter
# but the page's text. "12": a heading in a list item is the item's text, not a section; `> q` over `===`
# is one quote; a long front-matter description is cut to the window as body text is; a CSV whose header
# line holds no delimiter is one column (jobs/excel/reader.py csv_dialect); Excel numbers round halves away
# from zero; a "Total" row with its figures is embedded (jobs/excel/filters.py). "13": Excel rows under
# indented labels carry their parents' labels (jobs/excel/context.py); header lines tied by a corner cell
# merged down over them (up to four) and labels centred across a selection head their columns
# (jobs/excel/tables.py, reader.py); a short row that is a record of its table is kept (jobs/excel/records.py);
# a table's title is its caption with the units under it, not the notes around it, and `key: value` lines.
PIPELINE_VERSION = "13"

# The Python API (jobs/api.py), imported on first use: Ray workers import this package for every stage
# and need none of it.
__all__ = ["Collection", "Hit", "ingest", "open_collection"]


def __getattr__(name: str):
    if name in __all__:
        from jobs import api  # late: see above

        return getattr(api, name)
    raise AttributeError(f"module 'jobs' has no attribute {name!r}")
