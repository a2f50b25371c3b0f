"""Shared helpers for the benchmarks: a private CORPUSMILL_HOME and Ray temp dir, corpora, timed
subprocesses, scratch tables for COPY, and the tables/JSON every benchmark prints and writes.

Every benchmark runs `corpusmill` (and its plain counterparts) as subprocesses timed from the outside,
so process start, imports and model loads count the same on both sides of a ratio.

Environment:
  BENCH_OUT     where the JSON goes (default .corpusmill/bench)
  BENCH_FILES   use only the first N files of the corpus (quick checks); default: the whole corpus
  BENCH_DATA    the folder of the benchmarks' data sets (hugo-docs/content, powershell-docs, xquad-en, xlsx,
                openshift-docs; not in the repository): required by every benchmark that reads one
  BENCH_CORPUS  the Markdown corpus (default $BENCH_DATA/hugo-docs/content)
  BENCH_HOME    CORPUSMILL_HOME for the runs (default: a fresh temporary directory, removed at the end)
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
CONFIG = REPO / "configs" / "local.yaml"
MODEL = "sentence-transformers/all-MiniLM-L6-v2"


# ---------------------------------------------------------------------------------------------- places

def out_dir() -> Path:
    path = Path(os.environ.get("BENCH_OUT") or REPO / ".corpusmill" / "bench")
    path.mkdir(parents=True, exist_ok=True)
    return path


def work_dir() -> Path:
    """Scratch space for corpora and inputs, inside the private home."""
    path = Path(os.environ["CORPUSMILL_HOME"]) / "bench-work"
    path.mkdir(parents=True, exist_ok=True)
    return path


def bench_files() -> int | None:
    value = os.environ.get("BENCH_FILES", "").strip()
    return int(value) if value else None


def data_dir() -> Path:
    """BENCH_DATA: where the data sets are. No default: they live outside the repository, wherever the
    user keeps them."""
    value = os.environ.get("BENCH_DATA", "").strip()
    if not value:
        raise SystemExit("BENCH_DATA is not set: point it at the folder holding the benchmark data sets "
                         "(hugo-docs/content, powershell-docs, xquad-en, xlsx, openshift-docs; ops/bench/README.md)")
    path = Path(value).expanduser().resolve()
    if not path.is_dir():
        raise SystemExit(f"BENCH_DATA={value}: no such directory")
    return path


def xquad_path() -> Path:
    return data_dir() / "xquad-en" / "xquad.en.json"


def corpus_root() -> Path:
    value = os.environ.get("BENCH_CORPUS", "").strip()
    return Path(value).expanduser().resolve() if value else data_dir() / "hugo-docs" / "content"


def markdown_files(root: Path) -> list[Path]:
    """The Markdown files ingest would pick with configs/local.yaml (hidden paths excluded), sorted."""
    return sorted(p for p in root.rglob("*") if p.suffix in (".md", ".markdown") and p.is_file()
                  and not any(part.startswith(".") for part in p.relative_to(root).parts))


def corpus(n: int | None = None, name: str = "corpus") -> tuple[Path, list[Path]]:
    """The benchmark corpus: the whole root, or a copy of its first `n` files."""
    root = corpus_root()
    files = markdown_files(root)
    if n is None or n >= len(files):
        return root, files
    dest = work_dir() / f"{name}-{n}"
    shutil.rmtree(dest, ignore_errors=True)
    for f in files[:n]:
        target = dest / f.relative_to(root)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(f, target)
    return dest, markdown_files(dest)


def synthetic_corpus(base: int, factor: int) -> tuple[Path, list[Path]]:
    """`factor` copies (copy00/, copy01/, ...) of `base` files spread evenly over the corpus, so 1x, 4x and
    16x hold the same mix of documents and differ only in how many there are."""
    root = corpus_root()
    files = markdown_files(root)
    step = max(1, len(files) // base)
    picked = files[::step][:base]
    dest = work_dir() / f"synthetic-{base}x{factor}"
    shutil.rmtree(dest, ignore_errors=True)
    for k in range(factor):
        for f in picked:
            target = dest / f"copy{k:02d}" / f.relative_to(root)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, target)
    return dest, markdown_files(dest)


# ---------------------------------------------------------------------------------------------- session

@contextlib.contextmanager
def session():
    """A private CORPUSMILL_HOME (embedded PostgreSQL) and Ray temp dir for the benchmarks. On exit the
    embedded server is stopped and any Ray process left under the private temp dir is ended (by pid)."""
    made = not os.environ.get("BENCH_HOME") and not os.environ.get("BENCH_SESSION")
    home = Path(os.environ.get("BENCH_HOME") or tempfile.mkdtemp(prefix="cmbench-"))
    saved = {k: os.environ.get(k) for k in ("CORPUSMILL_HOME", "RAY_TMPDIR", "BENCH_SESSION")}
    if not os.environ.get("BENCH_SESSION"):
        os.environ["CORPUSMILL_HOME"] = str(home)
        # Ray's own files under a short private path (Unix socket paths are limited to 107 bytes).
        os.environ["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="cmray-")
        os.environ["BENCH_SESSION"] = "1"
    os.environ.pop("RAY_ADDRESS", None)  # always a local, private Ray
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        yield home
    finally:
        if saved["BENCH_SESSION"] is None:  # the outermost session cleans up
            stop_database()
            end_ray_leftovers(os.environ["RAY_TMPDIR"])
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            if made:
                shutil.rmtree(home, ignore_errors=True)


def database_url() -> str:
    """The embedded server of the private home (started if needed)."""
    from jobs.store import embedded

    return embedded.start()


def stop_database() -> None:
    """Stop the private home's embedded server. Without the `corpusmill` script beside this Python (a
    checkout run from PYTHONPATH, as on a GPU machine with carried packages) no server was started by it."""
    try:
        subprocess.run([str(BIN / "corpusmill"), "db", "stop"], capture_output=True, text=True, cwd=REPO)
    except FileNotFoundError:
        pass


def end_ray_leftovers(ray_tmp: str) -> list[int]:
    """Processes whose command line names our private Ray temp dir (a Ray started by one of our
    subprocesses that did not shut down): ended by pid, nothing else."""
    ended = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if ray_tmp and ray_tmp in cmdline and int(proc.name) != os.getpid():
            with contextlib.suppress(OSError):
                os.kill(int(proc.name), signal.SIGTERM)
                ended.append(int(proc.name))
    if ended:
        time.sleep(2)
    shutil.rmtree(ray_tmp, ignore_errors=True)
    return ended


# ---------------------------------------------------------------------------------------------- running

class Timed:
    def __init__(self) -> None:
        self.seconds = 0.0

    def __enter__(self) -> Timed:
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self.seconds = time.perf_counter() - self._t0


def hwm_kib(pid: int) -> int:
    """A process's peak resident memory so far (the kernel's VmHWM), in KiB; 0 once it has exited."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


class PeakRss:
    """The peak resident memory of one process (not its children: a local Ray's workers are the
    driver's descendants, and this measures the driver). VmHWM is the kernel's own high-water mark, so
    reading it every `period` seconds misses nothing but the last moments before the process exits."""

    def __init__(self, pid: int, period: float = 0.1):
        import threading

        self.pid, self.period, self.peak_kib = pid, period, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak_kib = max(self.peak_kib, hwm_kib(self.pid))
            self._stop.wait(self.period)

    def stop(self) -> float:
        self._stop.set()
        self._thread.join(timeout=5)
        return round(self.peak_kib / 1024, 1)


def run(args: list[str], log: Path | None = None, ok: tuple[int, ...] = (0,), timeout: float | None = None) -> dict:
    """Run a command from the repository root; returns rc, wall seconds, stdout and the process's own peak
    RSS in MiB (sampled). stderr (Ray's progress, logs) goes to `log`."""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    load_before = os.getloadavg()[0]
    t0 = time.perf_counter()
    with open(log or os.devnull, "w", encoding="utf-8") as err:
        proc = subprocess.Popen(args, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=err, text=True)
        rss = PeakRss(proc.pid)
        try:
            stdout, _ = proc.communicate(timeout=timeout)
        finally:
            if proc.poll() is None:
                proc.kill()
            peak = rss.stop()
    wall = time.perf_counter() - t0
    if proc.returncode not in ok:
        tail = Path(log).read_text(encoding="utf-8", errors="replace")[-3000:] if log else ""
        raise RuntimeError(f"{' '.join(map(str, args))} exited {proc.returncode}\n{stdout[-2000:]}\n{tail}")
    # The 1-minute load average around the run: this machine is shared, so say how busy it was.
    return {"rc": proc.returncode, "wall_s": wall, "stdout": stdout, "peak_rss_mib": peak,
            "load_avg_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)]}


def config_with(name: str, changes: dict[str, dict], base: Path = CONFIG) -> Path:
    """A copy of `base` with `changes` ({section: {key: value}}) applied, as work_dir()/NAME.yaml."""
    import yaml

    data = yaml.safe_load(base.read_text(encoding="utf-8"))
    for section, values in changes.items():
        data.setdefault(section, {}).update(values)
    templates = (data.get("excel") or {}).get("templates_dir")
    if templates and not Path(templates).is_absolute():  # relative to the config, which moves
        data["excel"]["templates_dir"] = str((base.parent / templates).resolve())
    path = work_dir() / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def ingest(input_dir: Path, collection: str, config: Path = CONFIG, tag: str | None = None,
           own_vectors: bool = True, timeout: float | None = None) -> dict:
    """`corpusmill ingest` as a user runs it, timed from outside. Exit 3 (a quality gate) still committed
    everything, so it counts as a finished run here. Returns wall_s, the run directory, its metrics and
    the run's `stage_stats` row from the runs table. `timeout`: seconds, then the command is killed
    (subprocess.TimeoutExpired).

    With `own_vectors` (the default) each collection embeds its own texts: vectors are not taken from the
    benchmark's other collections (`embedding.reuse_other_collections` off), or the second ingest of a
    corpus would time a lookup."""
    log = out_dir() / f"{tag or collection}.ingest.log"
    if own_vectors:
        config = config_with(f"{config.stem}-own-vectors", {"embedding": {"reuse_other_collections": False}}, config)
    # The embedded server's first start (initdb in a fresh home) happens before the clock: the scripts
    # compared with the ingest find it running, and a session's first ingest must not pay it alone.
    database_url()
    r = run([str(BIN / "corpusmill"), "ingest", "--config", str(config), "--input", str(input_dir),
             "--collection", collection], log=log, ok=(0, 3), timeout=timeout)
    run_dir = next((line.split(":", 1)[1].strip().removesuffix("/chunks") for line in r["stdout"].splitlines()
                    if line.startswith("parquet:")), None)
    if run_dir is None:
        raise RuntimeError(f"no run directory in the ingest output:\n{r['stdout']}")
    metrics = json.loads((Path(run_dir) / "qa" / "metrics.json").read_text(encoding="utf-8"))
    run_id = Path(run_dir).name
    return {"wall_s": r["wall_s"], "rc": r["rc"], "run_dir": run_dir, "run_id": run_id, "metrics": metrics,
            "load_avg_1m": r["load_avg_1m"], "driver_peak_rss_mib": r["peak_rss_mib"],
            "runs_table_stage_stats": runs_table_stats(run_id), "log": str(log), "stdout": r["stdout"]}


def runs_table_stats(run_id: str) -> dict | None:
    import psycopg

    with psycopg.connect(database_url()) as conn:
        row = conn.execute("SELECT stage_stats FROM corpusmill.runs WHERE run_id = %s", (run_id,)).fetchone()
    return row[0] if row else None


def python(module: str, *args: str, log: Path | None = None) -> dict:
    """Run `python -m module args...`; its last stdout line is JSON, returned with the wall time."""
    r = run([sys.executable, "-m", module, *args], log=log)
    lines = [line for line in r["stdout"].splitlines() if line.strip()]
    return {"wall_s": r["wall_s"], "load_avg_1m": r["load_avg_1m"], **json.loads(lines[-1])}


# ---------------------------------------------------------------------------------------------- output

def table(headers: list[str], rows: list[list], title: str = "") -> str:
    cells = [[_cell(c) for c in row] for row in [headers, *rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return (f"\n{title}\n" if title else "\n") + "\n".join(lines)


def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}" if abs(value) < 10 else f"{value:.1f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def run_one(name: str, bench, report) -> int:
    """A benchmark module's command line: run it in a private session, save its JSON, print its table."""
    with session():
        result = bench()
    save(name, result)
    print(report(result))
    return 0


def standalone(name: str, bench, report) -> int:
    """`python -m ops.bench.NAME`: one benchmark in its own private session, its JSON saved, its table printed."""
    with session():
        r = bench()
    save(name, r)
    print(report(r))
    return 0


def save(name: str, data: dict) -> Path:
    path = out_dir() / f"{name}.json"
    path.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    return path


def load(name: str) -> dict | None:
    path = out_dir() / f"{name}.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def machine() -> dict:
    import platform

    return {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
            "load_avg_1m": os.getloadavg()[0]}


# ---------------------------------------------------------------------------------------------- loading

def chunk_columns_sql(dimension: int, vector_type: str = "vector"):
    """The chunk table's column list (jobs.store.pgvector.CHUNK_COLUMNS), the vector as `vector_type(d)`."""
    from psycopg import sql

    from jobs.store.pgvector import _SQL_TYPES, CHUNK_COLUMNS

    defs = []
    for name, typ in CHUNK_COLUMNS:
        pg_type = sql.SQL("{}({})").format(sql.SQL(vector_type), sql.Literal(dimension)) if typ == "vector" \
            else sql.SQL(_SQL_TYPES.get(typ, typ))
        extra = sql.SQL(" PRIMARY KEY") if name == "chunk_id" else sql.SQL("")
        defs.append(sql.SQL("{} {}{}").format(sql.Identifier(name), pg_type, extra))
    return sql.SQL(", ").join(defs)


def create_scratch_table(conn, schema: str, table: str, dimension: int, vector_type: str = "vector") -> None:
    from psycopg import sql

    conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
    conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(schema, table)))
    conn.execute(sql.SQL("CREATE TABLE {} ({})").format(sql.Identifier(schema, table),
                                                       chunk_columns_sql(dimension, vector_type)))


def copy_rows(conn, schema: str, table: str, rows: list[dict], vector_type: str = "vector") -> int:
    """One `COPY … FROM STDIN (FORMAT BINARY)` of chunk rows (contract columns), as the sink does."""
    import numpy as np
    from psycopg import sql

    from jobs.store.pgvector import CHUNK_COLUMNS

    cols = sql.SQL(", ").join(sql.Identifier(c) for c, _ in CHUNK_COLUMNS)
    stmt = sql.SQL("COPY {} ({}) FROM STDIN WITH (FORMAT BINARY)").format(sql.Identifier(schema, table), cols)
    types = [vector_type if t == "vector" else t for _, t in CHUNK_COLUMNS]
    if vector_type == "halfvec":
        from pgvector import HalfVector

        wrap = HalfVector
    else:
        def wrap(v):
            return np.asarray(v, dtype=np.float32)
    with conn.cursor() as cur, cur.copy(stmt) as copy:
        copy.set_types(types)
        for r in rows:
            copy.write_row([wrap(r[c]) if t == "vector" else r.get(c) for c, t in CHUNK_COLUMNS])
    return len(rows)


def corpusmill_eval(collection: str, golden: str, config: Path | None = None, exact: bool = True) -> dict:
    """`corpusmill eval --json` of a collection in its config's search mode (`exact`: vectors by a flat
    scan, as the LangChain-style script's table is searched)."""
    return json.loads(run([str(BIN / "corpusmill"), "eval", "--collection", collection, "--golden", golden, "--json"]
                          + (["--config", str(config)] if config else []) + (["--exact"] if exact else []))["stdout"])
