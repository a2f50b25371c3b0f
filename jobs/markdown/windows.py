"""The Markdown chunker: structure, then scope, then length.

1. Units (sentences, list items, whole code blocks and tables) are normalized; repeated paragraphs
   in a document are dropped; a section of nothing but links becomes a `See also:` line on the
   content before it.
2. A document whose sections all fit the window under its title is one group (`whole_documents`);
   otherwise thin sections merge forward within their parent (jobs/markdown/merge.py).
3. Each group is cut into sentence windows (never across groups) bounded by the embedding model's
   token limit counted with the breadcrumb prefix, preferring to cut between blocks once a window
   is `soft_min_ratio` full; windows overlap by `overlap_sentences / window_sentences` of their units.
   Units over the window are cut first (jobs/markdown/cuts.py): a table between rows (header
   repeated); a code block between lines, each part fenced again with the opening fence's info
   string (`yaml`, `terminal`); a list item, quote, HTML block, sentence or the front matter's
   description (which opens the first group) between lines, then sentences, then words (then tokens,
   for a "word" over the limit). Every unit fits the window its section's breadcrumb leaves, so no
   chunk's tail is lost to the embedding model.
4. Short windows of bullets merge forward.
5. A chunk's `text` is its units as normalized; its `embed_text` is the breadcrumb, a tag line and the
   same units with prose and table cells rendered as a reader sees them (escapes resolved, link text without its URL,
   no emphasis or code marks, no HTML anchors: jobs/markdown/inline.py). Windows are sized on the
   unrendered units, which are never shorter, so the rendering only ever frees room.

`chunking.strategy: naive` instead cuts the document body into fixed token windows with overlap,
ignoring structure: the baseline every change is measured against.

Over 400 lines on purpose: the steps above share one window's state (units, budget, breadcrumb);
their helpers already live apart (merge.py, cuts.py, sentences.py).
"""

from __future__ import annotations

import json
from collections import Counter

from jobs.chunks.build import chunk_rows
from jobs.chunks.metadata import metadata_json
from jobs.chunks.quality import word_count
from jobs.config import ChunkingConfig, QualityConfig
from jobs.embed.tokens import TokenCounter, token_counter
from jobs.errors import is_bug
from jobs.markdown.boilerplate import is_navigation, see_also_line
from jobs.markdown.cuts import split_code, split_long_unit, split_table
from jobs.markdown.inline import render_inline
from jobs.markdown.merge import Group, Unit, merge_bullet_windows, merge_small_sections
from jobs.markdown.normalize import normalize
from jobs.rows import doc_marker, error_row, storable

_EXACT = {"code", "html"}  # embedded as written; prose and table cells are rendered (jobs/markdown/inline.py)
_TAG = {"sent": "p", "list": "list", "code": "code", "table": "table", "quote": "quote", "html": "html"}
_PROSE = {"sent", "list", "quote"}
# What a breadcrumb is followed by when a window's room is estimated: a typical tag line and the blank line.
_TAG_LINE = "\n[H2] [CODE] [LIST] [P]\n\n"


def breadcrumb_parts(title: str, heading_path: list[str]) -> list[str]:
    """The document title always leads; a first heading that repeats the title is not doubled."""
    rest = heading_path[1:] if heading_path and heading_path[0] == title else heading_path
    return [title] + list(rest)


def _introduces(unit: Unit) -> bool:
    return unit.text.rstrip().endswith(":") and unit.words <= 25


_BLOCKS = {"code", "table", "list"}


def _opens_block(units: list[Unit], k: int, budget: int) -> bool:
    """Whether unit k is a code block, table or list that unit k - 1 introduces ("…by running the
    following command:") and both fit one window, so a window ending between the two would leave the
    block without its reason (when they do not fit, moving the lead-in on would make it a chunk alone)."""
    return (0 < k < len(units) and units[k].kind in _BLOCKS and units[k].block != units[k - 1].block
            and units[k - 1].kind in _PROSE and _introduces(units[k - 1])
            and units[k - 1].tokens + units[k].tokens <= budget)


def _leads_in(unit: Unit) -> bool:
    """A unit too thin to stand alone before an oversized block: a lead-in ("Type/schema
    definition:"), the document's abstract, or a sentence of a few words."""
    return unit.kind == "abstract" or unit.words < 15 or _introduces(unit)


def window_bounds(units: list[Unit], budget: int, window: int, overlap: int, soft_ratio: float) -> list[tuple[int, int]]:
    """[start, end) unit ranges of at most `window` units and `budget` tokens.

    A group that needs several windows gets windows of about `soft_ratio * budget` tokens or more
    (cut once that full, at a paragraph boundary when one comes first), not windows packed to the
    brim: packing to the limit piles chunks up just under it with their last idea chopped. Overlap
    scales with windows cut short, so short windows never overlap almost entirely. A lead-in
    sentence ending with ':' stays with the block it introduces: a window does not end on it when
    the two fit one window (a chunk closing on "…by running the following command:" left the command
    to start the next chunk without its reason). An overlap may still start at such a block: the
    window before holds it whole, with its lead-in, and repeating the lead-in measured worse
    (it cost hugo described page hit@1). Nor does a window end on a heading line (a setext
    heading's text and underline, or an ATX heading) while what follows it in the group is its section:
    the heading would title nothing in its chunk and be missing from its section's."""
    n = len(units)
    total = sum(u.tokens for u in units)
    target = budget if total <= budget else soft_ratio * budget
    soft = soft_ratio * target

    def end_of(i: int) -> int:
        j, tokens = i, 0
        while j < n and j - i < window and (j == i or tokens + units[j].tokens <= budget):
            if j > i and tokens >= soft and units[j].block != units[j - 1].block:
                break
            tokens += units[j].tokens
            j += 1
            if tokens >= target:
                break
        if j == i + 1 and j < n and _leads_in(units[i]) and units[j].tokens > budget:
            j += 1
        elif j - i > 1 and _opens_block(units, j, budget):
            j -= 1
        while j - i > 1 and j < n and units[j - 1].kind == "heading":
            j -= 1  # a heading line opens its section's window, never closes the one before
        return j

    bounds, i = [], 0
    while i < n:
        j = end_of(i)
        if bounds and j <= bounds[-1][1]:
            # The overlap cannot reach past the previous window (an oversized block follows): it
            # would only repeat a tail of it as a chunk of its own, so start after it instead.
            i = bounds[-1][1]
            j = end_of(i)
        bounds.append((i, j))
        if j >= n:
            break
        i = max(i + 1, j - ((j - i) * overlap) // window)
    return bounds


def _rendered(unit: Unit) -> str:
    if unit.kind in _EXACT:
        return unit.text
    if unit.kind == "table":  # row by row: a mark must not pair with one in another row
        return "\n".join(render_inline(line) for line in unit.text.split("\n"))
    return render_inline(unit.text)


def join_units(text: str, units: list[Unit], rendered: bool = False) -> str:
    """Units' normalized texts with the source's own separators (paragraph, line or space); with
    `rendered`, prose units as a reader sees them (jobs/markdown/inline.py): what is embedded."""
    shown = _rendered if rendered else (lambda u: u.text)
    parts = [shown(units[0])]
    for prev, cur in zip(units, units[1:]):
        gap = text[prev.end:cur.start]
        if gap.strip() or cur.start < prev.end or prev.kind == "abstract":
            sep = "\n\n"  # something was dropped in between (a duplicate, markup), or a heading moved
        elif not gap:
            sep = ""  # one sentence split inside a token run, e.g. `[text][]`
        elif "\n\n" in gap:
            sep = "\n\n"
        elif "\n" in gap:
            sep = "\n"
        else:
            sep = " "
        parts.append(sep + shown(cur))
    return "".join(parts)


def running_lines(text: str, sections_units: list[list[dict]], repeats: int, max_words: int) -> set[int]:
    """Blocks that are a printed running header or footer ("ACME Corp · Confidential"): a one-line
    paragraph of fewer than `max_words` words standing alone `repeats` or more times in a document.
    Lead-ins ("For example:") repeat too, and are kept."""
    if not repeats:
        return set()
    by_block: dict[int, list[dict]] = {}
    for units in sections_units:
        for unit in units:
            by_block.setdefault(unit["block"], []).append(unit)
    seen: dict[str, list[int]] = {}
    for block, units in by_block.items():
        if len(units) != 1 or units[0]["kind"] != "sent":
            continue
        raw = text[units[0]["start"]:units[0]["end"]]
        line = " ".join(raw.split())
        if "\n" in raw.strip() or line.endswith(":") or word_count(line) >= max_words:
            continue
        seen.setdefault(line.casefold(), []).append(block)
    return {b for blocks in seen.values() if len(blocks) >= repeats for b in blocks}


def _prepare(doc: dict, cfg: ChunkingConfig, counter: TokenCounter, stats: Counter):
    """Kept sections with their normalized, deduplicated units, heading units and See-also lines."""
    text = doc["text"]
    seen: set[str] = set()
    kept: list[tuple[dict, list[Unit], Unit | None, list[str]]] = []
    running = running_lines(text, doc["units"], cfg.running_line_repeats, cfg.dedupe_min_words)
    for sec, raw in zip(doc["sections"], doc["units"]):
        units = []
        for unit in raw:
            start, end, kind, block = unit["start"], unit["end"], unit["kind"], unit["block"]
            if block in running:
                stats["running_lines"] += 1
                continue
            norm = normalize(text[start:end], kind, stats)
            if not norm:
                continue  # markup only (a shortcode line)
            words = word_count(norm)
            if kind in _PROSE and words >= cfg.dedupe_min_words:
                key = " ".join(norm.casefold().split())
                if key in seen:
                    stats["duplicate_units"] += 1
                    continue
                seen.add(key)
            units.append(Unit(start, end, kind, block, norm, words=words))
        heading_text = sec["heading_path"][-1] if sec["heading_path"] else ""
        if cfg.navigation_see_also and sec["level"] > 0 and is_navigation(heading_text, [u.text for u in units]):
            # A cross-reference list: its targets join the previous content as one line.
            stats["navigation_sections"] += 1
            line = see_also_line([u.text for u in units])
            if kept and line:
                kept[-1][3].append(line)
            continue
        heading = None
        # The title's own heading is in every breadcrumb already; repeating it in a body adds nothing.
        is_title = sec["level"] == 1 and sec["heading_path"] == [doc["title"]]
        if sec.get("heading_start") is not None and not is_title:
            h_text = normalize(text[sec["heading_start"]:sec["heading_end"]], "heading", stats)
            heading = Unit(sec["heading_start"], sec["heading_end"], "heading", -1 - len(kept), h_text,
                           words=word_count(h_text))
        kept.append((sec, units, heading, []))
    every = [u for _, units, h, _ in kept for u in units + ([h] if h else [])]
    for u, n in zip(every, counter.count([u.text for u in every])):
        u.tokens = n
    return kept


def _whole_document(doc: dict, kept: list, counter: TokenCounter, limit: int) -> Group | None:
    """The whole document as one group, its headings in the body, when it fits the window under the
    title alone. Scope before length: a short page whose every section fits one chunk is read best
    whole (a function's reference page: what it does, its usage, an example), where a cut per section
    leaves pieces that say less of the page than the page does. Longer documents go by section."""
    units: list[Unit] = []
    for n, (sec, sec_units, heading, _) in enumerate(kept):
        opens = n + 1 < len(kept) and kept[n + 1][0]["level"] > sec["level"]  # its sub-sections follow
        if heading is not None and (sec_units or opens):
            units.append(heading)
        units.extend(sec_units)
    tokens = sum(u.tokens for u in units)
    if not units or tokens > limit:  # most documents: decided before the tokenizer is asked
        return None
    (prefix,) = counter.count([doc["title"] + _TAG_LINE])
    if tokens + prefix > limit:
        return None
    return Group([], 0, units, sections=len(kept))


def _groups(doc: dict, cfg: ChunkingConfig, counter: TokenCounter, limit: int, stats: Counter,
            reserve: int = 0) -> list[Group]:
    """Sections (after merges) as groups to window; `reserve`: tokens the document's abstract will take."""
    kept = _prepare(doc, cfg, counter, stats)
    # What the window leaves a unit once its section's breadcrumb and a tag line precede it (a merged
    # group's breadcrumb is its parent's, never longer); one tokenizer call for all sections.
    prefixes = counter.count([cfg.breadcrumb_separator.join(breadcrumb_parts(doc["title"], k[0]["heading_path"]))
                              + _TAG_LINE for k in kept]) if kept else []
    for (_, units, _, _), prefix_tokens in zip(kept, prefixes):
        budget = max(limit - prefix_tokens, 16)
        for i in range(len(units) - 1, -1, -1):
            if units[i].tokens <= budget:
                continue
            if units[i].kind == "table":
                parts = split_table(units[i], doc["text"], counter, budget)
                stats["tables_split"] += len(parts) > 1
            elif units[i].kind == "code":
                parts = split_code(units[i], doc["text"], counter, budget)
                stats["code_blocks_split"] += len(parts) > 1
            elif units[i].kind in ("list", "quote", "html", "sent"):
                # A sentence over the budget is one the sentence model never ended (a paragraph of
                # 30 MB on one line, a run-on list of values): embedded whole, all but its first
                # tokens would be lost to the model, so it is cut like an over-long list item.
                parts = split_long_unit(units[i], doc["text"], counter, budget)
                key = "long_sentences_split" if units[i].kind == "sent" else f"{units[i].kind}_blocks_split"
                stats[key] += len(parts) > 1
            else:
                continue
            units[i:i + 1] = parts
    whole = _whole_document(doc, kept, counter, limit - reserve) if cfg.whole_documents and len(kept) > 1 else None
    if whole is not None:
        stats["whole_documents"] += 1
        groups = [whole]
    else:
        groups = merge_small_sections([k[0] for k in kept], [k[1] for k in kept], [k[2] for k in kept],
                                      cfg.small_section_tokens, min(cfg.merge_target_tokens, limit))
    # See-also lines follow the group that holds their section's content.
    lines = {id(u): k[3] for k in kept for u in k[1][-1:] if k[3]}
    for g in groups:
        g.see_also = [line for u in g.units for line in lines.get(id(u), [])]
        stats["merged_sections"] += g.sections - 1
    return groups


def _windows(group: Group, cfg: ChunkingConfig, budget: int) -> list[list[Unit]]:
    bounds = window_bounds(group.units, budget, cfg.window_sentences, cfg.overlap_sentences, cfg.soft_min_ratio)
    windows = [group.units[a:b] for a, b in bounds]
    return merge_bullet_windows(windows, cfg.bullet_merge_words, cfg.bullet_merge_max_words)


def _tags(group: Group, units: list[Unit]) -> list[str]:
    tags = {_TAG[u.kind] for u in units if u.kind in _TAG}
    if group.level:
        tags.add(f"h{group.level}")
    return sorted(tags)


def embed_text_for(crumb: str, tags: list[str], body: str, structural_tags: bool) -> str:
    if structural_tags and tags:
        return f"{crumb}\n{' '.join(f'[{t.upper()}]' for t in tags)}\n\n{body}"
    return f"{crumb}\n\n{body}"


def document_abstract(doc: dict, keys: list[str]) -> str:
    """The front matter's description (or summary), if any: a page whose body is one code example
    says what it is about only there."""
    meta = json.loads(doc.get("metadata_json") or "{}")
    for key in keys:
        value = meta.get(key)
        if isinstance(value, str) and value.strip():
            return " ".join(value.split())
    return ""


def _add_abstract(groups: list[Group], abstract: str, tokens: int, counter: TokenCounter, budget: int) -> None:
    """The abstract (`tokens` long) opens the first group as a unit of its own, so the token budget counts it.
    One over the first group's `budget` is cut as an over-long sentence is (between sentences, then
    words): each part a unit of its own, at the group's first offset (it has none in the body)."""
    if not groups or not abstract or abstract.casefold() in " ".join(u.text for u in groups[0].units).casefold():
        return
    first = groups[0].units[0]
    unit = Unit(0, len(abstract), "abstract", -(10**9), abstract, tokens, word_count(abstract))
    parts = split_long_unit(unit, abstract, counter, budget) if tokens > budget else [unit]
    for part in parts:
        part.start = part.end = first.start
    groups[0].units[:0] = parts


def _see_also_kept(body: str, lines: list[str], fits) -> int:
    """How many of the group's See-also lines fit the window after `body`: cross-references are the
    least of a chunk, and the pages they name are chunks of their own."""
    for n in range(len(lines), 0, -1):
        if fits(body + "\n\n" + "\n".join(lines[:n])):
            return n
    return 0


def _with_lines(body: str, lines: list[str]) -> str:
    return body + "\n\n" + "\n".join(lines) if lines else body


def structured_drafts(doc: dict, cfg: ChunkingConfig, counter: TokenCounter, stats: Counter,
                      description_keys: list[str] | None = None) -> list[dict]:
    """Chunk drafts (no ids or quality yet) of a parsed document with sentence units."""
    limit = min(cfg.max_tokens, counter.limit)
    drafts = []
    abstract = document_abstract(doc, description_keys or [])
    abstract_tokens = counter.count([abstract])[0] if abstract else 0
    groups = _groups(doc, cfg, counter, limit, stats, abstract_tokens)
    paths = [breadcrumb_parts(doc["title"], g.heading_path) for g in groups]
    crumbs = [cfg.breadcrumb_separator.join(path) for path in paths]
    budgets = [max(limit - n, 16) for n in counter.count([crumb + _TAG_LINE for crumb in crumbs])] if groups else []
    _add_abstract(groups, abstract, abstract_tokens, counter, budgets[0] if budgets else limit)
    for group, path, crumb, budget in zip(groups, paths, crumbs, budgets):
        windows = _windows(group, cfg, budget)
        w_index = 0
        while w_index < len(windows):
            units = windows[w_index]
            body, shown = join_units(doc["text"], units), join_units(doc["text"], units, rendered=True)
            tags = _tags(group, units)
            see_also = []
            if w_index == len(windows) - 1 and group.see_also:
                n = _see_also_kept(shown, group.see_also, lambda b, crumb=crumb, tags=tags: counter.count(
                    [embed_text_for(crumb, tags, b, cfg.structural_tags)])[0] <= limit)
                see_also = group.see_also[:n]
            embed = embed_text_for(crumb, tags, _with_lines(shown, see_also), cfg.structural_tags)
            if len(units) > 1 and counter.count([embed])[0] > limit:
                # The estimate (units summed, a typical tag line) ran over: the last unit moves to the next
                # window (where overlap may already hold it), or opens one of its own.
                nxt = windows[w_index + 1] if w_index + 1 < len(windows) else None
                windows[w_index] = units[:-1]
                if nxt is None:
                    windows.append(units[-1:])
                elif units[-1] not in nxt:
                    nxt.insert(0, units[-1])
                continue
            w_index += 1
            if w_index == len(windows) and group.see_also:
                stats["see_also_dropped"] += len(group.see_also) - len(see_also)
            located = [u for u in units if u.kind != "abstract"] or units
            drafts.append({"heading_path": path, "breadcrumb": crumb, "text": _with_lines(body, see_also),
                           "tags": tags, "char_start": located[0].start, "char_end": located[-1].end,
                           "embed_text": embed})
    return drafts


def naive_drafts(doc: dict, cfg: ChunkingConfig, counter: TokenCounter) -> list[dict]:
    """Fixed token windows with overlap over the document body: no structure, no prefix."""
    text = doc["text"]
    body_start = min((b["start"] for s in doc["sections"] for b in s["blocks"]), default=len(text))
    offsets = counter.offsets(text[body_start:])
    size = min(cfg.naive_tokens, counter.limit)
    step = max(size - cfg.naive_overlap_tokens, 1)
    drafts = []
    for i in range(0, max(len(offsets), 1), step):
        window = offsets[i:i + size]
        if not window:
            break
        a, b = body_start + window[0][0], body_start + window[-1][1]
        drafts.append({"heading_path": [doc["title"]], "breadcrumb": doc["title"], "text": text[a:b], "tags": [],
                       "char_start": a, "char_end": b, "embed_text": text[a:b]})
        if i + size >= len(offsets):
            break
    return drafts


def chunk_document(doc: dict, chunking: ChunkingConfig, quality: QualityConfig, embedding_model: str,
                   description_keys: tuple[str, ...] = ("description", "summary")) -> list[dict]:
    """Chunk rows of one parsed document. The first chunk opens with the front matter's description
    when there is one: the only text a chunk may hold from outside `source[char_start:char_end]`."""
    counter = token_counter(embedding_model)
    stats: Counter = Counter()
    if chunking.strategy == "naive":
        drafts = naive_drafts(doc, chunking, counter)
    else:
        drafts = structured_drafts(doc, chunking, counter, stats, list(description_keys))
    for d in drafts:  # counted once, in the body and headings; the breadcrumb and embed_text repeat them
        for key in ("text", "heading_path", "embed_text", "breadcrumb", "tags"):
            if key in d:
                d[key] = storable(d[key], stats if key in ("text", "heading_path") else Counter())
    doc_stats = json.dumps(dict(stats))
    if not drafts:
        return [doc_marker(doc, "empty", doc_stats=doc_stats)]
    token_counts = counter.count([d["embed_text"] for d in drafts])
    per_path: Counter = Counter()  # n in the locator counts chunks under the same heading path
    locators = []
    for d in drafts:
        path_key = chunking.breadcrumb_separator.join(d["heading_path"])
        locators.append(f"{doc['source_path']}##{path_key}#{per_path[path_key]}")
        per_path[path_key] += 1
    return chunk_rows(doc, drafts, source_type="markdown", locators=locators, token_counts=token_counts,
                      token_limit=counter.limit, quality=quality, doc_stats=doc_stats,
                      metadata=metadata_json(json.loads(doc.get("metadata_json") or "{}")))


def chunk_documents(rows: list[dict], *, chunking: ChunkingConfig, quality: QualityConfig,
                    embedding_model: str, description_keys: tuple[str, ...] = ("description", "summary")) -> list[dict]:
    """Stage: document rows with sentence units -> chunk rows (or one error/empty row per document)."""
    out = []
    for doc in rows:
        if doc.get("error_stage"):
            out.append(doc_marker(doc, "error", error_stage=doc["error_stage"],
                                  error_class=doc["error_class"], error_message=doc["error_message"]))
            continue
        try:
            out.extend(chunk_document(doc, chunking, quality, embedding_model, description_keys))
        except Exception as exc:
            if is_bug(exc):
                raise
            out.append(error_row(doc, "chunk", exc))
    return out
