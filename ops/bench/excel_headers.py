"""`make eval-excel`: how well Excel rows carry their headers, per workbook of the shared sets.

Every workbook under `$BENCH_DATA/xlsx/{stats,readxl,unstructured}` is read as an ingest reads it
(jobs.excel.render.iter_drafts, the config's `excel:` settings; no Ray, no database) and each row is
counted: embedded, or omitted by reason (the rule before the colon of `omit_reason`); among embedded
rows, those with half or more of their values under a generic `Column X` label, rows cut into parts
to fit the embedding model's window (jobs.excel.split) and parts still over it, and header rows
embedded as data (a row with two or more text cells and no value but a year, in a table whose rows
below hold values in most of those columns: the column names read again as a row). Text and value are
the reader's own kinds (jobs.excel.reader: a cell with a letter is text; `12,553`, `-`, `..` are values).

    python -m ops.bench.excel_headers [--config configs/local.yaml] [--json FILE] [--show N] [SET_OR_FILE ...]

`--show N` prints up to N examples of each failure per workbook, for reading what went wrong.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

from ops.bench import common

SETS = ("stats", "readxl", "unstructured")
_GENERIC = re.compile(r"Column [A-Z]{1,3}")
_YEAR = re.compile(r"(?:19|20)\d\d")


def generic_share(draft) -> float:
    """Share of a row's shown values whose label is a generic `Column X` (0 for a templated row): its fields
    as its text shows them (a bare row header has no label; a key labels its description)."""
    if draft.template != "fallback" or not draft.fields:
        return 0.0
    return sum(1 for label, _, _ in draft.fields if _GENERIC.fullmatch(label)) / len(draft.fields)


def header_as_data(draft, below: list) -> bool:
    """A row of text (years allowed) whose columns hold values in most rows of its table below it."""
    from jobs.excel.reader import TEXT, TYPED

    filled = [(i, c, k) for i, (c, k) in enumerate(zip(draft.cells, draft.kinds)) if c]
    text_cols = [i for i, _, k in filled if k == TEXT]
    if len(text_cols) < 2 or any(k == TYPED and not _YEAR.fullmatch(c.strip()) for _, c, k in filled):
        return False
    rows = below[:10]
    if len(rows) < 2:
        return False
    valued = 0
    for i in text_cols:
        kinds = [r.kinds[i] for r in rows if i < len(r.kinds) and i < len(r.cells) and r.cells[i]]
        valued += bool(kinds) and kinds.count(TYPED) >= 0.6 * len(kinds)
    return valued >= max(2, 0.5 * len(text_cols))


def measure(path: Path, excel_cfg, show: int = 0, counter=None) -> dict:
    """Counts for one workbook; `counter` (the embedding model's jobs.embed.tokens.TokenCounter) splits rows
    at its window as an ingest does and counts embedded rows still over it."""
    from jobs.excel.render import iter_drafts
    from jobs.excel.split import embed_text

    counts: Counter = Counter()
    drafts = list(iter_drafts(path, str(path), excel_cfg, counts, counter=counter))
    by_table: dict[int, list] = defaultdict(list)
    for d in drafts:
        by_table[id(d.table)].append(d)
    out = Counter()
    examples: dict[str, list[str]] = defaultdict(list)
    for rows in by_table.values():
        for pos, d in enumerate(rows):
            if d.verdict is not None:
                out["omitted:" + d.verdict[1].split(":", 1)[0]] += 1
                continue
            out["embedded"] += 1
            out["split rows"] += d.part is not None and d.part[0] == 1
            if counter is not None:
                tokens = d.tokens if d.tokens is not None else counter.count([embed_text(d)])[0]
                out["over window"] += tokens > counter.limit
            if generic_share(d) >= 0.5:
                out["generic"] += 1
                if len(examples["generic"]) < show:
                    examples["generic"].append(f"{d.sheet}!{d.row}: {d.text[:160]}")
            if header_as_data(d, rows[pos + 1:]):
                out["header_as_data"] += 1
                if len(examples["header_as_data"]) < show:
                    examples["header_as_data"].append(f"{d.sheet}!{d.row}: {d.text[:160]}")
    rows = sum(1 for d in drafts if d.part is None or d.part[0] == 1)  # a row cut into parts is one row
    return {"rows": rows, **dict(out), "examples": dict(examples)}


def workbooks(targets: list[str]) -> list[Path]:
    """The workbooks of `targets`: a set's name (under BENCH_DATA/xlsx) or a folder or file of them."""
    paths: list[Path] = []
    for t in targets or SETS:
        p = common.data_dir() / "xlsx" / t if t in SETS else Path(t)
        paths += sorted(p.rglob("*.xlsx")) if p.is_dir() else [p]
    return paths


def table(results: dict[str, dict]) -> str:
    reasons = sorted({k for r in results.values() for k in r if k.startswith("omitted:")})
    head = ["workbook", "rows", "embedded chunks", *(k.split(":", 1)[1] for k in reasons), "generic ≥ half", "share",
            "header as data", "split rows", "over window"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    total = Counter()
    for name, r in results.items():
        total.update({k: v for k, v in r.items() if isinstance(v, int)})
        lines.append(_line(name, r, reasons))
    lines.append(_line("**all**", total, reasons))
    return "\n".join(lines)


def _line(name: str, r, reasons: list[str]) -> str:
    emb = r.get("embedded", 0)
    share = f"{100 * r.get('generic', 0) / emb:.1f} %" if emb else "—"
    cells = [name, r.get("rows", 0), emb, *(r.get(k, 0) for k in reasons), r.get("generic", 0), share,
             r.get("header_as_data", 0), r.get("split rows", 0), r.get("over window", 0)]
    return "| " + " | ".join(str(c) for c in cells) + " |"


def main(argv: list[str] | None = None) -> int:
    from jobs.config import load_config

    ap = argparse.ArgumentParser(prog="python -m ops.bench.excel_headers", description=__doc__.split("\n\n")[0])
    ap.add_argument("targets", nargs="*", metavar="SET_OR_FILE", help=f"{', '.join(SETS)} or a path (default: all sets)")
    ap.add_argument("--config", default=str(common.REPO / "configs" / "local.yaml"))
    ap.add_argument("--json", metavar="FILE")
    ap.add_argument("--show", type=int, default=0, metavar="N")
    args = ap.parse_args(argv)
    cfg = load_config(args.config)
    from jobs.embed.tokens import token_counter

    counter = token_counter(cfg.embedding.model)
    results = {}
    paths = workbooks(args.targets)
    for n, path in enumerate(paths, 1):
        print(f"[{n}/{len(paths)}] {path.name}", file=sys.stderr, flush=True)
        try:
            results[f"{path.parent.name}/{path.name}"] = measure(path, cfg.excel, args.show, counter)
        except Exception as exc:  # a workbook the reader rejects is a row of the table, not the end of it
            results[f"{path.parent.name}/{path.name}"] = {"rows": 0, "error": f"{type(exc).__name__}: {exc}"}
    print(table(results))
    for name, r in results.items():
        for kind, lines in r.get("examples", {}).items():
            if lines:
                    print(f"\n{name} — {kind}:\n  " + "\n  ".join(lines))
        if "error" in r:
            print(f"\n{name}: {r['error']}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
