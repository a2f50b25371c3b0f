"""Row templates: how one spreadsheet row becomes one sentence, and the fallback when none fits.

A template is chosen per table by file glob and sheet name (glob or regex), and only when every
column its sentence needs is in that table's header: one loose glob cannot garble another table.
Without a template a row reads `Header: value; Header: value` over its non-empty cells, because a
value without its header means nothing in a prompt.

configs/templates/*.yaml hold one template per mapping, or a list of them under `templates:`:

    name: mountain-passes
    file: "passes*.xlsx"          # glob or list of globs, matched against the file name and its path
    sheet: "Passes"               # glob or list of globs (case-insensitive) ...
    sheet_regex: "^pass(es)?$"    # ... or a regex (re.search, case-insensitive)
    text: "The {Pass} pass is in {State}[, connecting {Connects}][, at {Altitude}]."
    aliases:                      # other headers a column goes by
      Altitude: [Elevation, Height]
    formats:                      # per column: a format spec (",.0f", ".1%"), a strftime pattern,
      Altitude: ",.0f"            # upper / lower / title, or {map: {raw value: shown}}

`[ ... ]` is optional: it vanishes when any column in it is empty. A row whose required column is
empty falls back to the generic rendering. Write `\\[ \\] \\{ \\}` for literal brackets and braces
(in YAML use single quotes or a block scalar, where backslashes stay as typed).
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import yaml

from jobs.errors import ConfigError
from jobs.excel.cells import SEPARATOR
from jobs.sources.globs import check_globs, matches
from jobs.template_files import template_files


def _key(name: str) -> str:
    # Header lookups ignore case, spacing and punctuation: {Stanley Cups} finds "stanley_cups".
    return re.sub(r"[\W_]+", "", name.casefold())


def render_fallback(labels: list[str], shown: list[str], names: list[bool] | None = None) -> str:
    """`Header: value; Header: value` over the non-empty cells; labels[i] names column i (an empty
    label: the value alone). `names[i]`: cell i is text, not a value; adjacent cells under one label (a
    header merged over them) of which one is text read as one value: `Period: 1998 Q1`, not `Period:
    1998; Period: Q1`."""
    return render_fields(fallback_fields(labels, shown, names))


def fallback_fields(labels: list[str], shown: list[str], names: list[bool] | None = None) -> list[tuple[str, str, int]]:
    """(label, value, first column) of each field `render_fallback` writes, in order."""
    fields: list[list] = []  # [label, values, first column, last column]
    for i, s in enumerate(shown):
        if not s:
            continue
        if fields and labels[i] and fields[-1][0] == labels[i] and fields[-1][3] == i - 1 and names is not None \
                and (names[i] or names[i - 1]):
            fields[-1][1].append(s)
            fields[-1][3] = i
        else:
            fields.append([labels[i], [s], i, i])
    return [(label, " ".join(values), first) for label, values, first, _ in fields]


def render_fields(fields: list[tuple]) -> str:
    return "; ".join(f"{f[0]}: {f[1]}" if f[0] else f[1] for f in fields)


# --- templates ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Field:
    name: str


@dataclass(frozen=True)
class _Optional:
    items: tuple


# One token of a template's text: an escaped character, "[", "]", a {placeholder}, a run of plain
# text (a backslash before anything else is plain too), or any other single character (a stray "{"
# or "}", reported as an error).
_TOKEN = re.compile(r"\\([\[\]{}\\])|(\[)|(\])|\{([^{}\[\]]+)\}|((?:[^\\\[\]{}]|\\(?![\[\]{}\\]))+)|(.)", re.S)


def parse_text(text: str) -> tuple:
    """Template text -> tree of literal strings, _Field and _Optional (nesting allowed)."""
    stack: list[list] = [[]]
    for m in _TOKEN.finditer(text):
        escaped, opening, closing, name, plain, stray = m.groups()
        if escaped is not None or plain is not None:
            stack[-1].append(escaped if escaped is not None else plain)
        elif opening:
            stack.append([])
        elif closing:
            if len(stack) == 1:
                raise ValueError(f"unmatched ']' at character {m.start()}")
            items = stack.pop()
            stack[-1].append(_Optional(tuple(items)))
        elif name is not None:
            stack[-1].append(_Field(name.strip()))
        else:
            raise ValueError(f"stray {stray!r} at character {m.start()} (write \\{stray} for a literal one)")
    if len(stack) != 1:
        raise ValueError("unclosed '['")
    return tuple(stack[0])


def _fields(items: tuple, required: bool = True):
    for it in items:
        if isinstance(it, _Field):
            yield it.name, required
        elif isinstance(it, _Optional):
            yield from _fields(it.items, False)


def _render(items: tuple, lookup) -> str | None:
    """None when a field at this level is empty: an optional segment vanishes, a required one fails."""
    out = []
    for it in items:
        if isinstance(it, str):
            out.append(it)
        elif isinstance(it, _Field):
            value = lookup(it.name)
            if not value:
                return None
            out.append(value)
        else:
            out.append(_render(it.items, lookup) or "")
    return "".join(out)


def _tidy(sentence: str) -> str:
    sentence = " ".join(sentence.split())
    return re.sub(r"\s+([,.;:!?)])", r"\1", sentence)  # a vanished segment can leave "word ," behind


_NAMED_FORMATS = {"upper": str.upper, "lower": str.lower, "title": str.title}
_STRFTIME = re.compile(r"%[A-Za-z]")  # a strftime directive such as %d or %B


def _plain(value) -> str:
    # Map keys are compared as text; 1.0 from a workbook must find the YAML key 1.
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)


def apply_format(spec, raw, shown: str) -> str:
    """One column's template format applied to a cell: `raw` is the cell value, `shown` how the workbook shows it."""
    if spec is None or raw is None:
        return shown
    if isinstance(spec, dict):
        mapping = {_plain(k): str(v) for k, v in spec["map"].items()}
        return mapping.get(_plain(raw), mapping.get(shown, shown))
    if spec in _NAMED_FORMATS:
        return _NAMED_FORMATS[spec](shown)
    if isinstance(raw, (dt.date, dt.time)) and _STRFTIME.search(spec):
        return raw.strftime(spec)
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        return format(raw, spec)
    return shown


def _validate_format(column: str, spec) -> None:
    if isinstance(spec, dict):
        if set(spec) != {"map"} or not isinstance(spec["map"], dict):
            raise ValueError(f"format of {column!r}: a mapping must be {{map: {{value: shown}}}}")
        return
    if not isinstance(spec, str):
        raise ValueError(f"format of {column!r} must be a string or {{map: ...}}, got {spec!r}")
    if spec in _NAMED_FORMATS or _STRFTIME.search(spec):
        return
    try:
        format(1.5, spec)
    except ValueError as exc:
        raise ValueError(f"format of {column!r}: {spec!r} is not a number format spec ({exc})") from exc


def file_matches(file_name: str, source_path: str, globs: tuple[str, ...] | list[str]) -> bool:
    """Whether a file glob matches the file's name or its source path, in the project's one glob
    dialect (jobs.sources.globs), so `passes*.xlsx` finds the file in any directory."""
    return matches(file_name, list(globs)) or matches(source_path, list(globs))


def sheet_matches(sheet: str, globs: tuple[str, ...] | list[str]) -> bool:
    """Whether a sheet glob matches the sheet's name, ignoring case: Excel does not tell `Passes` from `PASSES`."""
    return matches(sheet.casefold(), [g.casefold() for g in globs])


def _globs(value, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    values = [value] if isinstance(value, str) else value
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise ValueError(f"{what} must be a glob or a list of globs")
    check_globs(values, what)
    return tuple(values)


def _header_index(headers: list[str]) -> tuple[dict, dict]:
    by_key: dict[str, int] = {}
    by_last: dict[str, list[int]] = {}
    for i, h in enumerate(headers):
        if h:
            by_key.setdefault(_key(h), i)
            by_last.setdefault(_key(h.split(SEPARATOR)[-1]), []).append(i)
    return by_key, by_last


@dataclass(frozen=True)
class Template:
    name: str
    source: str
    text: str
    files: tuple[str, ...] = ("*",)
    sheets: tuple[str, ...] = ()
    sheet_regex: re.Pattern | None = None
    aliases: dict = field(default_factory=dict)
    formats: dict = field(default_factory=dict)
    tree: tuple = ()

    @classmethod
    def from_dict(cls, data: dict, source: str, default_name: str) -> Template:
        known = {"name", "file", "sheet", "sheet_regex", "text", "aliases", "formats"}
        if not isinstance(data, dict):
            raise ValueError(f"a template must be a mapping, got {type(data).__name__}")
        if set(data) - known:
            raise ValueError(f"unknown key(s) {sorted(set(data) - known)}; known: {sorted(known)}")
        if not isinstance(data.get("text"), str) or not data["text"].strip():
            raise ValueError("`text` (the sentence, with {Column} placeholders) is required")
        tree = parse_text(data["text"])
        if not any(True for _ in _fields(tree)):
            raise ValueError("`text` names no {Column}")
        aliases = data.get("aliases") or {}
        if not isinstance(aliases, dict):
            raise ValueError("`aliases` must map a column to a list of other header names")
        aliases = {str(k): tuple([v] if isinstance(v, str) else [str(x) for x in v]) for k, v in aliases.items()}
        formats = data.get("formats") or {}
        if not isinstance(formats, dict):
            raise ValueError("`formats` must map a column to its format")
        for column, spec in formats.items():
            _validate_format(str(column), spec)
        regex = None
        if data.get("sheet_regex") is not None:
            try:
                regex = re.compile(str(data["sheet_regex"]), re.I)
            except re.error as exc:
                raise ValueError(f"sheet_regex {data['sheet_regex']!r}: {exc}") from exc
        return cls(name=str(data.get("name") or default_name), source=source, text=data["text"],
                   files=_globs(data.get("file"), "`file`") or ("*",), sheets=_globs(data.get("sheet"), "`sheet`"),
                   sheet_regex=regex, aliases=aliases, formats={_key(str(k)): v for k, v in formats.items()}, tree=tree)

    def covers(self, file_name: str, source_path: str, sheet: str) -> bool:
        """File glob against the name or the path, then the sheet (any sheet when neither is given)."""
        if not file_matches(file_name, source_path, self.files):
            return False
        if self.sheet_regex is not None and not self.sheet_regex.search(sheet):
            return False
        return not self.sheets or sheet_matches(sheet, self.sheets)

    def _find(self, name: str, index: tuple[dict, dict]) -> int | None:
        by_key, by_last = index
        for candidate in (name, *self.aliases.get(name, ())):
            k = _key(candidate)
            if k in by_key:
                return by_key[k]
            if len(by_last.get(k, [])) == 1:
                return by_last[k][0]
        return None

    def bind(self, headers: list[str]) -> dict[str, int] | None:
        """Placeholder -> column index, or None when a required column is missing from `headers`.
        A name matches a whole header or, when unambiguous, the last part of a `Parent › Child` one."""
        index = _header_index(headers)
        binding = {}
        for name, required in _fields(self.tree):
            col = self._find(name, index)
            if col is not None:
                binding[name] = col
            elif required:
                return None
        return binding

    def missing(self, headers: list[str]) -> list[str]:
        """Required columns that `headers` lacks: what keeps this template from a table."""
        index = _header_index(headers)
        return [name for name, required in _fields(self.tree) if required and self._find(name, index) is None]

    def render(self, binding: dict[str, int], raw: list, shown: list[str]) -> str | None:
        """The row's sentence, or None when a required column is empty in this row."""
        def lookup(name: str) -> str:
            i = binding.get(name)
            if i is None or i >= len(shown) or not shown[i]:
                return ""
            return apply_format(self.formats.get(_key(name)), raw[i], shown[i])

        sentence = _render(self.tree, lookup)
        return _tidy(sentence) if sentence else None


class TemplateRegistry:
    """Templates in file-name order; the first that covers a table and finds its columns wins."""

    def __init__(self, templates: list[Template], directory: Path | None = None):
        self.templates = templates
        self.directory = directory

    def __len__(self) -> int:
        return len(self.templates)

    def match(self, file_name: str, source_path: str, sheet: str,
              headers: list[str]) -> tuple[Template, dict[str, int]] | None:
        for t in self.templates:
            if t.covers(file_name, source_path, sheet):
                binding = t.bind(headers)
                if binding is not None:
                    return t, binding
        return None


def _load_file(path: Path, text: str | None = None) -> list[Template]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8") if text is None else text)
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ConfigError(f"template file {path}: not valid UTF-8 YAML ({exc})") from exc
    items = data["templates"] if isinstance(data, dict) and "templates" in data else [data]
    if not isinstance(items, list):
        raise ConfigError(f"template file {path}: `templates` must be a list")
    out = []
    for n, item in enumerate(items, start=1):
        default = path.stem if len(items) == 1 else f"{path.stem}-{n}"
        try:
            out.append(Template.from_dict(item, str(path), default))
        except ValueError as exc:
            raise ConfigError(f"template file {path}, template {n}: {exc}") from exc
    return out


@lru_cache(maxsize=8)
def _load_cached(directory: str, signature: tuple) -> TemplateRegistry:
    return registry_from_texts(read_template_texts(directory), directory)


TemplateTexts = tuple[tuple[str, str], ...]  # (file name, YAML text) of each template file, sorted by name


def read_template_texts(directory: Path | str | None) -> TemplateTexts:
    """The template files of `directory` as text, read once on the driver: the job ships them to the
    Excel workers in the stage arguments, so a worker on another node (where the driver's directory may
    not exist, or hold other files) renders with exactly the templates the fingerprint hashed."""
    return tuple((p.name, p.read_text(encoding="utf-8")) for p in template_files(directory))


@lru_cache(maxsize=8)
def registry_from_texts(texts: TemplateTexts, origin: str = "") -> TemplateRegistry:
    """The registry of shipped template texts (`origin`: the driver's directory, for messages)."""
    templates = [t for name, text in texts for t in _load_file(Path(origin) / name, text)]
    names = [t.name for t in templates]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(f"templates in {origin}: duplicate template name(s) {dupes}")
    return TemplateRegistry(templates, Path(origin) if origin else None)


def load_templates(directory: Path | str | None) -> TemplateRegistry:
    """Every *.yaml/*.yml in `directory` (relative paths against the working directory); a missing
    directory means no templates (load_config refuses one a config names, so that only happens to an
    ExcelConfig built in code). Re-read only when a file changes, since each worker calls this per batch."""
    if directory is None:
        return TemplateRegistry([])
    path = Path(directory).resolve()
    if not path.is_dir():
        return TemplateRegistry([], path)
    files = template_files(path)
    signature = tuple((p.name, p.stat().st_mtime_ns, p.stat().st_size) for p in files)
    return _load_cached(str(path), signature)
