"""`make eval-excel`: how well Excel rows carry their headers, per workbook of the shared sets.

Every workbook under `../shared/data/xlsx/{stats,readxl,unstructured}` is read as an ingest reads it
(jobs.excel.render.iter_drafts, the config's `excel:` settings; no Ray, no database) and each row is
counted: embedded, or omitted by reason (the rule before the colon of `omit_reason`); among embedded
rows, those with half or more of their values under a generic `Column X` label, and header rows
embedded as data (a row with two or more text cells, none a number, in a table whose rows below
hold numbers in most of those columns: the column names read again as a row).

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
_NUMBER = re.compile(r"[-+(]?[$£€]?\d[\d,]*(?:\.\d+)?%?\)?")


def _numberish(cell: str) -> bool:
    return bool(_NUMBER.fullmatch(cell.strip()))


def _year(cell: str) -> bool:
    return bool(re.fullmatch(r"(?:19|20)\d\d", cell.strip()))


def generic_share(draft) -> float:
    """Share of a row's non-empty values whose label is a generic `Column X` (0 for a templated row)."""
    if draft.template != "fallback":
        return 0.0
    from jobs.excel.render import row_labels

    filled = [i for i, c in enumerate(draft.cells) if c]
    if not filled:
        return 0.0
    labels = row_labels(draft.table, draft.cells)  # as the text shows them (a bare row header has none)
    return sum(1 for i in filled if _GENERIC.fullmatch(labels[i])) / len(filled)


def header_as_data(draft, below: list) -> bool:
    """A text-only row whose columns hold numbers in most rows of its table below it."""
    text_cols = [i for i, c in enumerate(draft.cells) if c and not _numberish(c)]
    if len(text_cols) < 2 or any(_numberish(c) and not _year(c) for c in draft.cells if c):
        return False
    rows = below[:10]
    if len(rows) < 2:
        return False
    numeric_cols = 0
    for i in text_cols:
        values = [r.cells[i] for r in rows if i < len(r.cells) and r.cells[i]]
        numeric_cols += bool(values) and sum(map(_numberish, values)) >= 0.6 * len(values)
    return numeric_cols >= max(2, 0.5 * len(text_cols))


def measure(path: Path, excel_cfg, show: int = 0) -> dict:
    from jobs.excel.render import iter_drafts

    counts: Counter = Counter()
    drafts = list(iter_drafts(path, str(path), excel_cfg, counts))
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
            if generic_share(d) >= 0.5:
                out["generic"] += 1
                if len(examples["generic"]) < show:
                    examples["generic"].append(f"{d.sheet}!{d.row}: {d.text[:160]}")
            if header_as_data(d, rows[pos + 1:]):
                out["header_as_data"] += 1
                if len(examples["header_as_data"]) < show:
                    examples["header_as_data"].append(f"{d.sheet}!{d.row}: {d.text[:160]}")
    return {"rows": len(drafts), **dict(out), "examples": dict(examples)}


def workbooks(targets: list[str]) -> list[Path]:
    root = common.SHARED / "xlsx"
    paths: list[Path] = []
    for t in targets or SETS:
        p = root / t if t in SETS else Path(t)
        paths += sorted(p.rglob("*.xlsx")) if p.is_dir() else [p]
    return paths


def table(results: dict[str, dict]) -> str:
    reasons = sorted({k for r in results.values() for k in r if k.startswith("omitted:")})
    head = ["workbook", "rows", "embedded", *(k.split(":", 1)[1] for k in reasons), "generic ≥ half", "share",
            "header as data"]
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
             r.get("header_as_data", 0)]
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
    results = {}
    paths = workbooks(args.targets)
    for n, path in enumerate(paths, 1):
        print(f"[{n}/{len(paths)}] {path.name}", file=sys.stderr, flush=True)
        try:
            results[f"{path.parent.name}/{path.name}"] = measure(path, cfg.excel, args.show)
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
