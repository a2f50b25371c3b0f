"""Write a SQuAD-format file (e.g. XQuAD) out as one Markdown file per article, ready to ingest and evaluate.

    python ops/xquad_to_markdown.py XQUAD_JSON OUT_DIR

The same JSON file then serves as the golden set: its questions name these files as their source paths.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

# The evaluation module is stdlib-only, so let this script run from a checkout without installing the package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jobs.tools.evaluate import load_golden, squad_to_markdown


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("squad_json", type=Path, help="SQuAD-format JSON, e.g. xquad.en.json")
    parser.add_argument("out_dir", type=Path, help="folder for the Markdown files (created if missing)")
    args = parser.parse_args(argv)
    try:
        paths = squad_to_markdown(args.squad_json, args.out_dir)
        questions = load_golden(args.squad_json)
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"wrote {len(paths)} Markdown files to {args.out_dir} for {len(questions)} questions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
