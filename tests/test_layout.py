"""The package reads as the pipeline: imports between the top-level parts of `jobs/` flow one way,
and no module outgrows what one reader holds in mind.

A part is a package directly under `jobs/` (`jobs.markdown`) or a top-level module (`jobs.config`).
Every `import` counts, late ones inside functions too: a cycle hidden in a function is still a cycle.
"""

import ast
import functools
import pickle
import re
import subprocess
import sys
from pathlib import Path

JOBS = Path(__file__).resolve().parents[1] / "jobs"
MAX_LINES = 600

# Lowest first. A part may import its own rank or lower ones, never a higher one. Equal ranks are peers
# that do not import each other (the check below finds any cycle among them).
LAYERS = [
    # `jobs`: the package itself (PIPELINE_VERSION); web: the search page's file
    {"jobs", "errors", "home", "defaults", "model_refs", "config_keys", "template_files", "web",
     "progress_line"},  # progress_line: how a long step shows progress on a terminal (no database, no Ray)
    {"sources"},  # where documents come from: discovery, listing, the plan
    {"database_urls"},  # the database URL as a user gives it (flag, variable, secret file), checked
    {"config"},
    # the row schemas between stages (the chunk contract, error and empty markers); terms: the text analysis
    # chunk rows carry and the search applies to queries (both sides use it)
    {"rows", "terms"},
    {"store"},  # the job's write side: PostgreSQL + pgvector, Parquet, the sink
    {"chunks"},  # what both source types share: ids, quality bands, the one chunk-row builder
    {"embed"},  # the embedding model: resolution, tokenizer, encoder
    {"markdown", "excel"},  # one package per source type, each its whole path to chunk rows
    # the search that reads what the store wrote: queries embedded by the collection's model (embed),
    # ranked over its tables (store); below checks, so an ingest's checks may measure through it
    {"search"},
    {"checks"},  # what every ingest measures: run metrics, index metrics, gates
    # plain-Python stages onto Ray Data; the Ray a job runs on; whether that Ray can hold a run's actor pools
    {"adapter", "ray_session", "cluster_fit"},
    {"pipeline"},  # the ingest's stage specs, for Ray and for a small run in process
    {"in_process", "on_ray"},  # a run's stages: in the driver process (a small run), or on Ray Data
    {"plan", "load", "reembed"},  # jobs that need no stage: light enough for a quick command
    {"tools"},  # commands over stored runs: report, evaluate, stats, bench-embedders
    {"ingest", "ingest_outcome"},  # ingest_outcome: what a run ends with (its result, or why it stopped)
    {"api"},  # the Python API: open a collection, search, ingest
    {"serve"},  # the API over HTTP
    {"exit_status", "cli_args"},  # an exception's exit status and message; the arguments' types
    {"service_commands"},  # the command line's `serve` and `upgrade` (jobs/cli.py registers them)
    {"cli"},
]
RANK = {part: rank for rank, parts in enumerate(LAYERS) for part in parts}


def _part(module: str) -> str:
    names = module.split(".")
    return names[1] if len(names) > 1 else "jobs"


def _is_part(name: str) -> bool:
    return (JOBS / f"{name}.py").is_file() or (JOBS / name / "__init__.py").is_file()


_PARSE_ALL = """
import ast, pickle, sys
from pathlib import Path
trees = {str(p): ast.parse(p.read_text(), str(p)) for p in sorted(Path(sys.argv[1]).rglob("*.py"))}
sys.stdout.buffer.write(pickle.dumps(trees))
"""


@functools.cache
def _trees() -> dict[Path, ast.Module]:
    """Every module of `jobs/`, parsed in a fresh interpreter. CPython 3.11 keeps the AST builder's
    recursion depth per interpreter, not per thread, so an `ast.parse` here races any thread that a
    test run left building ASTs (Ray's, pytest's) and fails with "AST constructor recursion depth
    mismatch" (python/cpython#106905). A child process has no such threads."""
    out = subprocess.run([sys.executable, "-c", _PARSE_ALL, str(JOBS)], check=True,
                         capture_output=True).stdout
    return {Path(path): tree for path, tree in pickle.loads(out).items()}


def _imports() -> dict[tuple[str, str], list[str]]:
    """(importing part, imported part) -> the files where it happens."""
    edges: dict[tuple[str, str], list[str]] = {}
    for path, tree in _trees().items():
        rel = path.relative_to(JOBS.parent)
        here = _part(".".join(rel.with_suffix("").parts).removesuffix(".__init__"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets = [node.module] if node.module != "jobs" else [
                    f"jobs.{a.name}" if _is_part(a.name) else "jobs" for a in node.names]
            else:
                continue
            for target in targets:
                if target == "jobs" or target.startswith("jobs."):
                    there = _part(target)
                    # The package's own lazy re-export of the API (`from jobs import open_collection`) is a
                    # facade, not a dependency of the low layer: no module below imports through it.
                    if there != here and not (rel.as_posix() == "jobs/__init__.py" and there == "api"):
                        edges.setdefault((here, there), []).append(f"{rel}:{node.lineno}")
    return edges


def test_every_part_of_jobs_has_a_layer():
    parts = {p.stem if p.is_file() else p.name for p in JOBS.iterdir()
             if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()}
    parts.discard("configs")  # the shipped configs, installed as package data
    assert parts - set(RANK) == set(), "add the new part to LAYERS"


def test_imports_flow_from_higher_parts_to_lower_ones():
    upward = [f"{a} imports {b} ({', '.join(where)})" for (a, b), where in sorted(_imports().items())
              if RANK[b] > RANK[a]]
    assert upward == []


def test_no_import_cycle_between_parts():
    graph: dict[str, set[str]] = {}
    for a, b in _imports():
        graph.setdefault(a, set()).add(b)

    def cycle_from(start: str, node: str, seen: tuple[str, ...]) -> tuple[str, ...] | None:
        for nxt in sorted(graph.get(node, ())):
            if nxt == start:
                return seen + (nxt,)
            if nxt not in seen:
                found = cycle_from(start, nxt, seen + (nxt,))
                if found:
                    return found
        return None

    cycles = {" -> ".join(c) for part in graph if (c := cycle_from(part, part, (part,)))}
    assert cycles == set()


def test_no_module_over_the_size_limit():
    long = {str(p.relative_to(JOBS.parent)): n for p in JOBS.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def _reason(line: str) -> str:
    """The comment of a source line, without tool directives (`noqa`, `type: ignore`): what it says."""
    if "#" not in line:
        return ""
    comment = line.split("#", 1)[1]
    comment = re.sub(r"(noqa(:\s*[A-Z0-9, ]+)?|type:\s*ignore(\[[^]]*\])?|pragma:[^#]*)", "", comment)
    return comment.strip(" #:")


def late_imports_without_a_reason(path: Path, tree: ast.AST) -> list[int]:
    """Lines of imports inside functions that do not say why: a reason is a comment on the import's own
    line, or on the line just above it; imports in a run right under such a comment share it."""
    lines = path.read_text().splitlines()
    silent = []
    for func in ast.walk(tree):
        if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(func):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            i = node.lineno - 1
            if _reason(lines[i]):
                continue
            j = i - 1  # up through the run of imports this one belongs to, to the line above it
            while j >= 0 and re.match(r"\s*(import|from)\s", lines[j]) and not _reason(lines[j]):
                j -= 1
            above = lines[j].strip() if j >= 0 else ""
            if not (above.startswith("#") and _reason(above)):
                silent.append(node.lineno)
    return silent


def test_late_imports_say_why():
    """An import inside a function is there to keep start-up light (a CLI command, a driver that only
    names a stage); it says so in a comment on its line or just above. jobs/cli.py is the exception
    by design: each command imports what it needs, as its module docstring says."""
    silent = [f"{path.relative_to(JOBS.parent)}:{n}" for path, tree in sorted(_trees().items())
              if path != JOBS / "cli.py" for n in late_imports_without_a_reason(path, tree)]
    assert silent == []


def test_a_comment_a_few_lines_away_is_not_a_reason(tmp_path):
    """The check above can fail: a comment two lines up, or a bare `# noqa`, excuses nothing."""
    src = tmp_path / "m.py"
    src.write_text("def f():\n    # a comment about something else\n    x = 1\n    import json\n"
                   "    import csv  # noqa: F401\n    return x\n\n\ndef g():\n"
                   "    # late: only g needs these\n    import json\n    import csv\n    return json, csv\n")
    assert late_imports_without_a_reason(src, ast.parse(src.read_text())) == [4, 5]
