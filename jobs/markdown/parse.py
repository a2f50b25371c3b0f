"""Markdown into sections by heading, then typed blocks: structure before anything else.

Offsets are into the document's source text as `read_source_text` returns it (UTF-8, BOM dropped,
line endings made `\\n`), so `text[block.start:block.end]` is always the block verbatim.

Rules that matter for retrieval:
- front matter (YAML `---`, TOML `+++`) becomes metadata and is never chunked;
- ATX, setext and OneNote `[Heading]{.underline}` lines open sections, ATX and setext ones at the top
  level only: a heading in a list item (indented to the item's content) or a quote (`> ## Note`) is
  the item's or the quote's text, as CommonMark nests it there, and its section goes on around it;
- a setext underline under a quote's line is no heading: `> q` over `---` is a quote and a rule, and
  `> q` over `===` (or `--`) is the quote's paragraph `q\n===`, the underline a lazy continuation line;
- nothing inside a code block or an HTML block is a heading;
- code blocks are typed `code` and kept verbatim (never inline-rendered, never sentence-split), as
  CommonMark finds them: fences of backticks or tildes; a fence inside a list item, indented relative
  to the item's content column (`1. Run:` / blank / `    ```sh`); a fence inside a blockquote (its `>`
  lines, to the closing fence or the end of the quote); indented code (4+ columns after a blank line,
  outside any list item). A fence in a list item ends the `list` block and is a block of its own (its
  lines as written, indentation included); the item's further lines and items make another `list`
  block. One deviation: a fence ends only at its closing fence (or the end of the file), also in a
  list item and when the closing fence lacks its quote's `>`. CommonMark ends it at the first line
  less indented than the item (code pasted at column 0) and then reads the closing fence as the
  opening of a new one that swallows the rest of the file;
- HTML blocks as CommonMark opens and ends them (`<div>`, `<p>`, a tag alone on its line: to the next
  blank line; `<!--`: to the line holding `-->`; `<pre>`, `<script>`: to the closing tag) are `html`;
- code blocks and tables stay whole blocks (the chunker cuts one only when it is over the model's
  window, between lines or rows);
- a "heading" line over MAX_HEADING_CHARS is a paragraph: as a heading it would become the
  breadcrumb of every chunk below it and leave no body (a one-line 30 MB file starting with `#`);
- a setext underline makes a heading of a one-line paragraph only. CommonMark would make the whole
  paragraph above it the heading; in the wild that is nearly always a converter's block delimiter,
  as in AsciiDoc turned Markdown: `[NOTE]` / `----` / text / `----`. The `[NOTE]`-style attribute
  line and the delimiters around its block are dropped and the text between stays a paragraph
  (openshift-docs: 1,735 such blocks made `[NOTE]` and ~1,600 closing sentences into headings).

Our own block parser, not markdown-it-py's block tokens: the rules above that leave CommonMark (an
AsciiDoc block's `[NOTE]` and closing sentence read as setext headings: 3,336 in openshift-docs; the
one-line setext; the heading length cap; OneNote headings) would each be a plugin or a pass over its
tokens; its tokens nest blocks in lists and quotes and carry line maps, where a section holds flat
blocks with character offsets; and it parses these corpora about 4x slower. Where CommonMark is the
rule, markdown-it-py is the reference: tests/markdown/test_parse.py checks code blocks and headings
against its parse, and the HTML blocks' start and end patterns are its own (HTML_SEQUENCES).
Over 400 lines on purpose: the line classifier's containers (list items, quotes, fences, HTML blocks)
read one another's state line by line.
"""

from __future__ import annotations

import json
import logging
import re
import tomllib  # Python 3.11+ (pyproject: requires-python >= 3.11)
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml
from markdown_it.rules_block.html_block import HTML_SEQUENCES

from jobs.errors import NotUtf8Error, is_bug
from jobs.markdown.inline import render_inline
from jobs.markdown.normalize import LINK_DEFINITION
from jobs.rows import error_fields
from jobs.sources.reads import work_bytes

log = logging.getLogger(__name__)

# A fence's opening line after its indentation (the indentation is checked against the container).
_FENCE_OPEN = re.compile(r"^(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
_ATX = re.compile(
    r"^ {0,3}(?P<hashes>#{1,6})"  # 1-6 hashes, at most 3 spaces of indent
    r"(?:[ \t]+(?P<text>.*?))?"  # the heading text, optional (an empty heading is legal)
    r"(?:[ \t]+#+)?[ \t]*$"  # an optional closing run of hashes
)
_SETEXT_UNDERLINE = re.compile(r"^ {0,3}(?P<marks>=+|-+)[ \t]*$")
_ONENOTE_HEADING = re.compile(r"^\s*\[(?P<text>[^\]]+)\]\{\.underline\}\s*$")
_THEMATIC_BREAK = re.compile(r"^ {0,3}(?:(?:-[ \t]*){3,}|(?:\*[ \t]*){3,}|(?:_[ \t]*){3,})$")
_LIST_ITEM = re.compile(r"^(?P<indent>[ \t]*)(?:[-*+•]|\d{1,9}[.)])[ \t]+\S")
_TABLE_SEPARATOR = re.compile(r"^\s*\|?\s*:?-{1,}:?\s*(?:\|\s*:?-{1,}:?\s*)*\|?\s*$")
_QUOTE = re.compile(r"^ {0,3}>")
_QUOTE_PREFIX = re.compile(r"^(?: {0,3}> ?)+")  # the `>` marks of a quoted line, nested quotes included
# A CommonMark list item's marker (no `•`: CommonMark reads that as text) and the gap up to its content.
_ITEM_MARKER = re.compile(r"^(?P<lead>[ \t]*(?:[-*+]|\d{1,9}[.)]))(?P<gap>[ \t]+)\S")
# What ends a paragraph rather than continue it lazily (a line less indented than its list item that
# is still the item's paragraph): a fence, an ATX heading, a quote, a list item, an HTML block.
_INTERRUPTS = re.compile(r"^(?:`{3}|~{3}|#{1,6}(?:[ \t]|$)|>|[-*+][ \t]|\d{1,9}[.)][ \t]|<)")
_HTML_START = re.compile(r"^ {0,3}<(?:!--|[A-Za-z/])")
# AsciiDoc's block attributes (`[NOTE]`, `[source,yaml]`, `[WARNING]`) on the line above a delimiter
# (`----`, `====`, `****`, `____`, `....`) that opens a block the same delimiter closes.
_BLOCK_ATTRIBUTES = re.compile(r"^\[[^\[\]]*\][ \t]*$")
_BLOCK_DELIMITER = re.compile(r"^(?:-{4,}|={4,}|\*{4,}|_{4,}|\.{4,})[ \t]*$")
MAX_HEADING_CHARS = 500  # the longest heading line in tests/data is 81 characters

# Heading clean-up: markup that must not leak into headings and breadcrumbs.
_HTML_COMMENT = re.compile(r"<!--.*?-->", re.S)
_ANCHOR = re.compile(r"<a\s+(?:name|id)=[^>]*>\s*</a>", re.I)
_ATTR_BLOCK = re.compile(r"\s*\{[#.][^}]*\}\s*$")  # `{#custom-id}` / `{.class}` after a heading


@dataclass
class Block:
    kind: str  # p | list | code | table | quote | html
    start: int
    end: int


@dataclass
class Section:
    heading_path: list[str]  # headings from the top level down to this section's own
    level: int  # 0 for text before the first heading
    blocks: list[Block] = field(default_factory=list)
    # The heading line(s) in the source, so a merged chunk can show a sub-section's heading in its body.
    heading_start: int | None = None
    heading_end: int | None = None


@dataclass
class ParsedMarkdown:
    metadata: dict
    title: str
    sections: list[Section]

    def sections_as_dicts(self) -> list[dict]:
        """The sections as a document row's `sections` column holds them (jobs.rows.SECTION_TYPE)."""
        return [asdict(s) for s in self.sections]


def read_source_text(path: str | Path) -> str:
    """The document's text as every offset refers to it. Invalid UTF-8 raises (the file is reported)."""
    return decode_source_text(Path(path).read_bytes())


def decode_source_text(raw: bytes) -> str:
    """read_source_text for bytes already in hand (read from an object store or carried in the work item)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NotUtf8Error(
            f"not valid UTF-8 (byte 0x{raw[exc.start]:02x} at offset {exc.start}); re-save the file as UTF-8"
        ) from None
    if text.startswith("\ufeff"):
        text = text[1:]
    return text.replace("\r\n", "\n").replace("\r", "\n")


def clean_heading(text: str) -> str:
    text = _HTML_COMMENT.sub("", text)
    text = _ANCHOR.sub("", text)
    text = _ATTR_BLOCK.sub("", text)
    return " ".join(render_inline(text).split())


# libyaml's parser when PyYAML has it: the pure-Python one took about half of the parse stage's time
# (hugo-docs, timed in one process: parse 0.66-0.70 s with it, 0.36-0.41 s with libyaml).
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _load_yaml(text: str):
    return yaml.load(text, Loader=_YAML_LOADER)


def _front_matter(text: str) -> tuple[dict, int]:
    """(metadata, offset where the body starts). Malformed front matter is kept out of the chunks
    and reported in the metadata rather than failing the document."""
    for fence, loader in (("---", _load_yaml), ("+++", tomllib.loads)):
        if not text.startswith(fence + "\n"):
            continue
        closers = ["\n" + fence + "\n", "\n...\n"] if fence == "---" else ["\n" + fence + "\n"]
        ends = [(text.find(c, len(fence)), c) for c in closers]
        ends = [(i, c) for i, c in ends if i >= 0]
        if not ends and text.rstrip().endswith("\n" + fence):
            ends = [(text.rstrip().rfind("\n" + fence), "\n" + fence)]
        if not ends:
            return {}, 0
        i, closer = min(ends)
        body = text[len(fence) + 1 : i + 1]
        try:
            meta = _json_keys(loader(body) or {})
            if not isinstance(meta, dict):
                # Not a mapping (`---`, a line of text, `---`): no front matter but a rule and the page's
                # own text, as CommonMark reads it; the text stays in the chunks.
                return {}, 0
        except Exception as exc:  # a broken header must not lose the document's text
            meta = {"front_matter_error": f"{type(exc).__name__}: {exc}"[:500]}
        return meta, min(i + len(closer), len(text))
    return {}, 0


def _json_keys(value):
    """Front matter whose mapping keys JSON can hold: YAML reads `2024-01-01:` as a date key (and a
    sequence as a tuple key), which the metadata's JSON would refuse; such a key is kept as its text."""
    if isinstance(value, dict):
        return {k if isinstance(k, (str, int, float, bool)) or k is None else str(k): _json_keys(v)
                for k, v in value.items()}
    if isinstance(value, list):
        return [_json_keys(v) for v in value]
    return value


def _lines(text: str, start: int) -> list[tuple[int, int, str]]:
    """(start, end, line) for each line from `start`; `end` excludes the newline."""
    out, pos = [], start
    while pos < len(text):
        nl = text.find("\n", pos)
        end = len(text) if nl < 0 else nl
        out.append((pos, end, text[pos:end]))
        pos = end + 1
    return out


def _indent(line: str) -> tuple[int, str]:
    """(columns of the line's indentation, tabs stopping at multiples of 4 as CommonMark's do; the rest)."""
    rest = line.lstrip(" \t")
    return len(line[:len(line) - len(rest)].expandtabs(4)), rest


def _closes_fence(rest: str, indent: int, fence: str) -> bool:
    stripped = rest.strip()
    return indent <= 3 and len(stripped) >= len(fence) and stripped == fence[0] * len(stripped)


def _html_block_end(rest: str, prev: str):
    """For a line (its indentation stripped) that opens a CommonMark HTML block: "blank" (the block
    runs to the next blank line) or the pattern of the line that ends it; None for no HTML block. The
    start and end patterns are markdown-it-py's, the reference the tests compare with."""
    for start, end, interrupts in HTML_SEQUENCES:
        if start.search(rest):
            if not interrupts and prev == "text":
                return None  # a lone tag does not interrupt a paragraph
            return "blank" if end.pattern == "^$" else end
    return None


def _classify(lines: list[tuple[int, int, str]], onenote: bool) -> list[tuple[str, int, str]]:
    """Per line: (kind, level, heading text). Kinds: code, html, blank, heading, hr, text, setext (a
    text line turned heading by the underline that follows), underline. For code and html lines, level
    1 marks the first line of a block (two fences in a row are two blocks); for text lines, a line
    inside a list item."""
    kinds: list[tuple[str, int, str]] = []
    fence: str | None = None
    fence_col = 0  # the content column of the list item holding the open fence (0: none)
    fence_quoted = False  # the open fence is inside a blockquote
    indented = False  # inside an indented code block
    html_end = None  # the open HTML block: "blank" or the pattern of its last line
    items: list[int] = []  # content columns of the open list items, outermost first
    delimiter: str | None = None  # the delimiter line of the open attributed block, if one is open
    for _, _, line in lines:
        indent, rest = _indent(line)
        prev = kinds[-1][0] if kinds else "blank"
        if fence is not None:
            if fence_quoted:
                q = _QUOTE_PREFIX.match(line)
                inner_indent, inner = _indent(line[q.end():]) if q else (indent, rest)
                if q or _closes_fence(inner, inner_indent, fence):
                    kinds.append(("code", 0, ""))
                    if _closes_fence(inner, inner_indent, fence):
                        fence = None
                    continue
                fence = None  # a line out of the quote ends the quote and the fence in it
            else:  # see the module docstring: a fence in a list item ends at its closing fence only
                kinds.append(("code", 0, ""))
                if _closes_fence(rest, max(indent - fence_col, 0), fence):
                    fence = None
                continue
        if indented:
            if not line.strip():
                kinds.append(("blank", 0, ""))
                continue
            if indent >= 4:
                k = len(kinds) - 1
                while kinds[k][0] == "blank":  # blank lines between code lines are the block's
                    kinds[k] = ("code", 0, "")
                    k -= 1
                kinds.append(("code", 0, ""))
                continue
            indented = False
        if html_end is not None:
            if html_end == "blank" and not line.strip():
                html_end = None
            else:
                kinds.append(("html", 0, ""))
                if html_end != "blank" and html_end.search(line):
                    html_end = None
                continue
        if delimiter is not None and line.strip() == delimiter:
            kinds.append(("hr", 0, ""))
            delimiter = None
            continue
        if (_BLOCK_DELIMITER.match(line) and kinds and kinds[-1][0] == "text"
                and _BLOCK_ATTRIBUTES.match(lines[len(kinds) - 1][2])):
            kinds[-1] = ("hr", 0, "")  # the attribute line goes with its delimiter
            kinds.append(("hr", 0, ""))
            delimiter = line.strip()
            continue
        if not line.strip():
            kinds.append(("blank", 0, ""))
            continue
        if items and indent < items[-1] and not (prev == "text" and not _INTERRUPTS.match(rest)
                                                 and not _THEMATIC_BREAK.match(line)):
            while items and items[-1] > indent:  # the line is out of these items (not a lazy continuation)
                items.pop()
        if indent >= 4 and not items and prev == "blank":
            # Indented code: CommonMark's only after a blank line (an indented line under a paragraph
            # continues it) and outside list items (where it is the item's text).
            indented = True
            kinds.append(("code", 1, ""))
            continue
        col = items[-1] if items else 0
        m = _FENCE_OPEN.match(rest) if 0 <= indent - col <= 3 else None
        quoted = False
        if not m and _QUOTE.match(line):
            # A fence in a quote is a code block of the quoted lines, `>` marks and all: verbatim, so
            # never inline-rendered, and the quote's text around it stays quote blocks of its own. The
            # simplest of the options: unquoting would break the contract that a block is its source span.
            inner_indent, inner = _indent(line[_QUOTE_PREFIX.match(line).end():])
            m = _FENCE_OPEN.match(inner) if inner_indent <= 3 else None
            quoted = True
        if m and not (m["fence"][0] == "`" and "`" in m["info"]):
            fence, fence_col, fence_quoted = m["fence"], 0 if quoted else col, quoted
            kinds.append(("code", 1, ""))
            continue
        if indent <= 3 and rest.startswith("<"):
            html_end = _html_block_end(rest, prev)
            if html_end is not None:
                kinds.append(("html", 1, ""))
                if html_end != "blank" and html_end.search(rest):
                    html_end = None  # `<!-- one line -->`
                continue
        heading_sized = len(line) <= MAX_HEADING_CHARS
        # In a list item (`items` left open: the line is indented to an item's content), a heading is the
        # item's text: CommonMark nests it in the item, and as a section it would cut the list off its section.
        m = _ATX.match(line) if heading_sized and not items else None
        if m:
            kinds.append(("heading", len(m["hashes"]), clean_heading(m["text"] or "")))
            continue
        m = _SETEXT_UNDERLINE.match(line)
        if m and prev == "text" and items:  # the underline of a heading in the item, or a lazy `===`
            kinds.append(("text", 1, ""))
            continue
        one_line = len(kinds) < 2 or kinds[-2][0] != "text"
        above = lines[len(kinds) - 1][2] if kinds else ""
        # Not under a quote's line: `> note` then `---` is a quote and a thematic break (CommonMark).
        # Nor under a list item's line (a `---` less indented than the item ends the list: a rule).
        if (m and prev == "text" and one_line and len(above) <= MAX_HEADING_CHARS and kinds[-1][1] == 0
                and not _LIST_ITEM.match(above) and not _QUOTE.match(above)):
            level = 1 if m["marks"][0] == "=" else 2
            kinds[-1] = ("setext", level, clean_heading(lines[len(kinds) - 1][2]))
            kinds.append(("underline", 0, ""))
            continue
        if _THEMATIC_BREAK.match(line):
            kinds.append(("hr", 0, ""))
            continue
        m = _ONENOTE_HEADING.match(line) if onenote and heading_sized else None
        if m:
            kinds.append(("heading", 3, clean_heading(m["text"])))
            continue
        m = _ITEM_MARKER.match(line)
        if m:
            while items and items[-1] > indent:  # a sibling or an outer item: the inner ones end
                items.pop()
            lead, content = len(m["lead"].expandtabs(4)), len(m[0][:-1].expandtabs(4))
            items.append(content if content - lead <= 4 else lead + 1)  # 5+ spaces: the content is indented code
        kinds.append(("text", 1 if items else 0, ""))
    return kinds


def _blocks(lines: list[tuple[int, int, str]], kinds: list[tuple[str, int, str]], lo: int, hi: int) -> list[Block]:
    """Typed blocks for lines[lo:hi] (a section body)."""
    blocks: list[Block] = []
    in_list = False  # the last block was a list, or a code or HTML block inside one
    i = lo
    while i < hi:
        kind = kinds[i][0]
        line = lines[i][2]
        if kind in ("blank", "hr", "underline"):
            i += 1
            continue
        j = i + 1
        if kind in ("code", "html"):
            # the block's lines up to the next block's first (level 1) line
            while j < hi and kinds[j][0] == kind and kinds[j][1] == 0:
                j += 1
            if kind == "html" and _HTML_COMMENT.fullmatch(_text_of(lines, i, j).strip()):
                # A block that is nothing but a comment is invisible on the page: no block at all.
                # What follows its closing line (often a run of link reference definitions under
                # "<!-- link references -->") is a block of its own.
                i = j
                continue
            block_kind = kind
        elif "|" in line and (
            line.lstrip().startswith("|") or (i + 1 < hi and _TABLE_SEPARATOR.match(lines[i + 1][2]))
        ):
            while j < hi and kinds[j][0] == "text" and "|" in lines[j][2]:
                j += 1
            block_kind = "table"
        elif _LIST_ITEM.match(line) or (in_list and kinds[i][1] == 1):
            # an item, or the rest of an item after a code or HTML block inside it
            while j < hi:
                if kinds[j][0] == "text":
                    j += 1
                elif kinds[j][0] == "blank":
                    # a blank line inside a list: the list goes on if an item or an indented line follows
                    k = j
                    while k < hi and kinds[k][0] == "blank":
                        k += 1
                    nxt = lines[k][2] if k < hi else ""
                    if k < hi and kinds[k][0] == "text" and (_LIST_ITEM.match(nxt) or nxt.startswith(("  ", "\t"))):
                        j = k
                    else:
                        break
                else:
                    break
            block_kind = "list"
        elif _QUOTE.match(line):
            while j < hi and kinds[j][0] == "text" and (_QUOTE.match(lines[j][2]) or _lazy_underline(lines, j)):
                j += 1
            block_kind = "quote"
        elif _HTML_START.match(line):
            # a line that opens with a tag yet starts no HTML block (`<span>…</span> and text`)
            while j < hi and kinds[j][0] == "text":
                j += 1
            block_kind = "html"
        else:
            while j < hi and kinds[j][0] == "text" and not (
                _LIST_ITEM.match(lines[j][2]) or _QUOTE.match(lines[j][2]) or lines[j][2].lstrip().startswith("|")
            ):
                j += 1
            if all(LINK_DEFINITION.match(lines[k][2]) for k in range(i, j)):
                # Link reference definitions say where links point; CommonMark renders nothing for
                # them. Dropped here, before sentence splitting cuts one inside (`[08]:` | `https://…`)
                # where normalization's line rule no longer sees a definition.
                i = j
                continue
            block_kind = "p"
        blocks.append(Block(block_kind, lines[i][0], lines[j - 1][1]))
        in_list = block_kind == "list" or (in_list and block_kind in ("code", "html") and line[:1] in (" ", "\t"))
        i = j
    return blocks


def _lazy_underline(lines: list[tuple[int, int, str]], j: int) -> bool:
    """Whether line j, an unquoted text line under a quote's line, is a setext underline (`===`, `--`)
    that continues the quote's paragraph: CommonMark reads `> q` over `===` as the quote's paragraph
    `q\n===` (an underline cannot reach into the quote to make a heading). A `---` is a rule, not text."""
    if not _SETEXT_UNDERLINE.match(lines[j][2]):
        return False
    above = lines[j - 1][2]
    q = _QUOTE_PREFIX.match(above)
    if not q:
        return True  # an underline continuing the paragraph already
    inner = above[q.end():]
    return bool(inner.strip()) and not _ATX.match(inner)  # the quote's paragraph, not its heading or `>` alone


def _text_of(lines: list[tuple[int, int, str]], i: int, j: int) -> str:
    return "\n".join(line for _, _, line in lines[i:j])


def parse_markdown(text: str, fallback_title: str, *, title_from_front_matter: bool = True,
                   onenote_headings: bool = True) -> ParsedMarkdown:
    metadata, body_start = _front_matter(text)
    lines = _lines(text, body_start)
    kinds = _classify(lines, onenote_headings)

    # Section boundaries: every heading line (an ATX/OneNote heading, or the text line of a setext pair).
    heads = [i for i, k in enumerate(kinds) if k[0] in ("heading", "setext")]
    sections: list[Section] = []
    stack: list[tuple[int, str]] = []
    if not heads or heads[0] > 0:
        first = heads[0] if heads else len(lines)
        sections.append(Section([], 0, _blocks(lines, kinds, 0, first)))
    for n, h in enumerate(heads):
        level, heading = kinds[h][1], kinds[h][2]
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, heading or "(untitled)"))
        body_lo = h + (2 if kinds[h][0] == "setext" else 1)
        body_hi = heads[n + 1] if n + 1 < len(heads) else len(lines)
        sections.append(Section([t for _, t in stack], level, _blocks(lines, kinds, body_lo, body_hi),
                                heading_start=lines[h][0], heading_end=lines[body_lo - 1][1]))

    title = ""
    if title_from_front_matter and isinstance(metadata.get("title"), str):
        title = clean_heading(metadata["title"])
    if not title:
        h1 = next((kinds[h][2] for h in heads if kinds[h][1] == 1 and kinds[h][2]), "")
        title = h1 or fallback_title
    return ParsedMarkdown(metadata=metadata, title=title, sections=sections)


def parse_documents(rows: list[dict], *, title_from_front_matter: bool = True, onenote_headings: bool = True,
                    storage=None) -> list[dict]:
    """Stage: work rows (Markdown files) -> document rows with sections. A file that cannot be read
    or parsed becomes an error row; the others go on. `abs_path` is a local path or an object URI,
    read here on the worker (`storage`: jobs.sources.storage.StorageOptions), unless the driver put the
    bytes in `content` (--read-via-driver)."""
    out = []
    for work in rows:
        if work.get("error_stage"):
            out.append(work)
            continue
        doc = dict(work)
        doc.pop("content", None)  # the bytes stop here; the text travels on
        try:
            text = decode_source_text(work_bytes(work, storage))
            parsed = parse_markdown(
                text,
                Path(work["source_path"]).stem,
                title_from_front_matter=title_from_front_matter,
                onenote_headings=onenote_headings,
            )
            if "front_matter_error" in parsed.metadata:  # the text goes on; the keys a filter would name do not
                log.warning("%s: front matter not read (%s): the document is chunked without its metadata, so "
                            "--filter on its keys will not find it", work["source_path"],
                            parsed.metadata["front_matter_error"].split("\n", 1)[0])
            doc.update(
                title=parsed.title,
                metadata_json=json.dumps(parsed.metadata, default=str, ensure_ascii=False),
                text=text,
                sections=parsed.sections_as_dicts(),
            )
        except Exception as exc:
            if is_bug(exc):
                raise
            doc.update(error_fields("parse_markdown", exc))
        out.append(doc)
    return out
