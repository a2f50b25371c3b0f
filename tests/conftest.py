"""Shared fixtures: a real embedded PostgreSQL + pgvector and a real local Ray head, one per session
(per pytest-xdist worker); one ingest of the bundled corpus that read-only tests share; `run_cli`, a
command in this process, and `cli_process`, one as its own process.

Every test works in its own collection under the session's temporary CORPUSMILL_HOME, so tests
never see each other's documents or a developer's `.corpusmill/`.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "tests" / "data" / "corpus"
BIN = Path(sys.executable).parent
# Ray's token auth: `ray start` (ray_address) writes ~/.ray/auth_token and clients must present it. Set
# before any test module imports Ray: the mode is read when Ray is imported, not when ray.init runs.
os.environ["RAY_AUTH_MODE"] = "token"


@pytest.fixture(scope="session")
def cm_home() -> Path:
    # Not under pytest's basetemp: pytest prunes old basetemps when another session starts, which
    # would delete a running server's data directory under it.
    home = Path(tempfile.mkdtemp(prefix="corpusmill-test-"))
    os.environ["CORPUSMILL_HOME"] = str(home)
    os.environ.pop("DATABASE_URL", None)
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    yield home
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_url(cm_home) -> str:
    from jobs.store import embedded

    url = embedded.start()
    yield url
    embedded.stop()


@pytest.fixture()
def store(pg_url):
    from jobs.store.pgvector import PgStore

    with PgStore(pg_url) as s:
        s.migrate()
        yield s


@pytest.fixture()
def ray_env(ray_address, pg_url, cm_home) -> dict:
    """A process's environment joined to the session's Ray head: its runs go through Ray whatever their size."""
    return dict(os.environ, RAY_ADDRESS=ray_address, CORPUSMILL_HOME=str(cm_home), TOKENIZERS_PARALLELISM="false")


def ensure_ray_token() -> None:
    """`ray start --head` in token mode refuses to start without a token, where `ray.init` makes one: on a
    fresh machine the first test to start a head would fail, or pass only after a test that ran
    `ray.init`. Ray's own command makes ~/.ray/auth_token once, when there is none."""
    out = subprocess.run([str(BIN / "ray"), "get-auth-token", "--generate"], capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise RuntimeError(f"ray get-auth-token --generate failed:\n{out.stdout}\n{out.stderr}")


@pytest.fixture(scope="session")
def ray_address(cm_home) -> str:
    """A local Ray head shared by every CLI run in the session (saves a Ray start per ingest)."""
    ensure_ray_token()
    temp = Path("/tmp") / f"cmray-{os.getpid()}"  # Unix socket paths must stay short
    cmd = [str(BIN / "ray"), "start", "--head", "--num-cpus=6", "--include-dashboard=false",
           "--disable-usage-stats", f"--temp-dir={temp}", "--port=0"]
    # Its own session and process group: stop_ray_under finds the daemons by group.
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=180, start_new_session=True)
    if out.returncode != 0:
        raise RuntimeError(f"ray start failed:\n{out.stdout}\n{out.stderr}")
    address = None
    for line in (out.stdout + out.stderr).splitlines():
        line = re.sub(r"\x1b\[[0-9;]*m", "", line)  # `ray start` colours its hints on some installs
        if "ray start --address=" in line:
            address = line.split("--address=")[1].strip().strip("'\"")
    assert address, out.stdout
    yield address
    stop_ray_under(temp)
    shutil.rmtree(temp, ignore_errors=True)


def ray_groups_under(temp: Path) -> set[int]:
    """Process groups of the processes whose command line names `temp` (a Ray temp dir)."""
    import psutil

    groups = set()
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            if any(str(temp) in arg for arg in proc.info["cmdline"] or []):
                groups.add(os.getpgid(proc.pid))
        except (psutil.NoSuchProcess, psutil.AccessDenied, ProcessLookupError):
            continue
    return groups


def stop_ray_under(temp: Path) -> None:
    """Kill the Ray processes started with `temp` as their temp dir, and only those.

    `ray stop --force` would kill every Ray on the machine, including another test session's head
    or a developer's own cluster. The daemons of one `ray start` share a process group and carry
    their temp dir in their command lines (agents and workers rename themselves, but stay in the
    group), so the groups of the processes naming `temp` are what is ours.
    """
    import signal

    import psutil

    groups = ray_groups_under(temp)
    groups.discard(os.getpgrp())  # never the test session itself
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pgid in groups:
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                pass
        if sig == signal.SIGTERM:
            psutil.wait_procs([p for p in psutil.process_iter() if _in_groups(p, groups)], timeout=10)


def _in_groups(proc, groups: set[int]) -> bool:
    try:
        return os.getpgid(proc.pid) in groups
    except (ProcessLookupError, PermissionError):
        return False


def run_cli(*args: str, env: dict[str, str | None] | None = None) -> subprocess.CompletedProcess:
    """`corpusmill ARGS` in this process (jobs.cli.main), with its exit status, standard output and
    standard error (log records included, as the command's handler would print them) as a subprocess
    gives them. For tests that are not about the process: a subprocess per command repeats the
    interpreter start, the torch and spaCy imports and the model loads. `env`: variables set (None:
    unset) for the command only. A run of more than ray.in_process_max_documents documents, or with
    RAY_ADDRESS set, goes through Ray: run those as processes (`cli_process`)."""
    from jobs import cli  # late, as every jobs import in this file: the fixtures import what they use

    out, err = io.StringIO(), io.StringIO()
    handler = logging.StreamHandler(err)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    level = root.level
    saved = {k: os.environ.get(k) for k in (env or {})}
    try:
        for k, v in (env or {}).items():
            _set_env(k, v)
        root.addHandler(handler)
        root.setLevel(logging.DEBUG if "-v" in args else logging.INFO)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.main(list(args))
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
        for k, v in saved.items():
            _set_env(k, v)
    return subprocess.CompletedProcess(["corpusmill", *args], code, out.getvalue(), err.getvalue())


def _set_env(key: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(key, None)
    else:
        os.environ[key] = value


def cli_process(*args: str, env: dict, timeout: int = 600, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """`corpusmill ARGS` as its own process, in `env`: for runs on Ray and tests about the process."""
    return subprocess.run([sys.executable, "-m", "jobs.cli", *args], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture()
def corpus(tmp_path) -> Path:
    """A private, writable copy of the bundled corpus."""
    dst = tmp_path / "corpus"
    shutil.copytree(CORPUS, dst)
    return dst


@dataclass(frozen=True)
class Ingested:
    """A finished ingest: its config, input, run directory and what the command printed."""
    collection: str
    config: Path
    corpus: Path
    runs: Path
    out: subprocess.CompletedProcess


@pytest.fixture(scope="session")
def default_ingest(tmp_path_factory, pg_url) -> Ingested:
    """The bundled corpus ingested once per session, in process, as a user's small run goes (collection
    `e2e_basic`, its QA report written). Tests that only read a collection share it: they must not change
    its input or its collection; one that needs its own ingests its own (or loads this run's Parquet). Under
    pytest-xdist (`--dist loadfile`) each worker that runs a test of it ingests it once."""
    root = tmp_path_factory.mktemp("default")
    corpus = Path(shutil.copytree(CORPUS, root / "corpus"))
    cfg = write_config(root / "c.yaml", "e2e_basic", [corpus], report=True)
    out = run_cli("ingest", "--config", str(cfg), "--output", str(root / "runs"))
    assert out.returncode == 0, out.stdout + out.stderr
    return Ingested("e2e_basic", cfg, corpus, root / "runs", out)


@pytest.fixture(scope="session")
def clean_copies(tmp_path_factory, pg_url) -> tuple[Path, str]:
    """CLEAN_COPIES copies of the bundled corpus (big_corpus) ingested once per session with COPIES, in this
    process (no Ray: a clean run to compare interrupted ones with, by another path), as `e2e_clean`. Its
    tests sit in one file, so one xdist worker makes it."""
    root = tmp_path_factory.mktemp("clean")
    big = big_corpus(CORPUS, root / "big", copies=CLEAN_COPIES)
    n_docs = len(list(big.rglob("*.md")))
    cfg = write_config(root / "c.yaml", "e2e_clean", [big], ray__in_process_max_documents=n_docs, **COPIES)
    out = run_cli("ingest", "--config", str(cfg))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "run in this process" in out.stderr
    return big, "e2e_clean"


# The config overrides a big_corpus run needs: its documents are copies of each other, so they are
# near-duplicate neighbours (the gate is off), and with shared text stored once which copy holds a text
# would follow commit order, so a resumed run and a clean one would differ in holders, not in content.
# Every copy is embedded (no vector reuse): the tests that kill, restart or race a run need it to take
# as long as that many distinct documents, not finish once the first copy's vectors are in.
COPIES = dict(database__shared_text="each", gates__max_duplicate_neighbour_rate=None, embedding__reuse=False)
CLEAN_COPIES = 6  # 36 documents: the kill and the fence tests interrupt runs of this size (clean_copies)


def big_corpus(src: Path, dst: Path, copies: int) -> Path:
    """`copies` copies of the Markdown files under `src`, one directory each: enough documents for a
    run that can be interrupted part way. Ingest them with COPIES."""
    for i in range(copies):
        for f in src.rglob("*.md"):
            target = dst / f"copy{i:02d}" / f.relative_to(src)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(f, target)
    return dst


def write_config(path: Path, collection: str, roots: list[Path], **overrides) -> Path:
    """A job config for tests: configs/local.yaml with its input roots and collection replaced. Vectors
    come only from the collection's own tables: the tests' collections share one database and many hold
    the same texts, so taking another's would make a test depend on which ran before it (the test of
    `embedding.reuse_other_collections` turns it on)."""
    import yaml

    data = yaml.safe_load((REPO / "configs" / "local.yaml").read_text())
    data["excel"]["templates_dir"] = str(REPO / "configs" / "templates")  # relative to local.yaml, not the copy
    data["collection"] = collection
    data["input"]["roots"] = [str(r) for r in roots]
    data["ray"]["progress_bars"] = False
    data["embedding"]["reuse_other_collections"] = False
    data["report"] = False  # the QA report's HTML and plots: a test that reads them turns it on (report=True)
    for dotted, value in overrides.items():
        node = data
        *parents, leaf = dotted.split("__")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    path.write_text(yaml.safe_dump(data))
    return path


class S3Server:
    """A real S3 protocol server (moto's server mode) on loopback, with request accounting."""

    def __init__(self, endpoint: str, recording: Path):
        self.endpoint = endpoint
        self.recording = recording

    def client(self):
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1")

    def _post(self, action: str) -> None:
        import urllib.request

        urllib.request.urlopen(urllib.request.Request(f"{self.endpoint}/moto-api/recorder/{action}", method="POST",
                                                      data=b""), timeout=30).read()

    def record(self):
        """Context manager: the requests the server receives inside it, as (method, path, query) tuples."""
        import contextlib
        import json
        from urllib.parse import urlsplit

        @contextlib.contextmanager
        def recording():
            seen: list[tuple[str, str, str]] = []
            self._post("reset-recording")
            self._post("start-recording")
            try:
                yield seen
            finally:
                self._post("stop-recording")
                for line in self.recording.read_text().splitlines():
                    entry = json.loads(line)
                    url = urlsplit(entry["url"])
                    seen.append((entry["method"], url.path, url.query))
        return recording()


def object_gets(requests: list[tuple[str, str, str]]) -> list[str]:
    """The object bodies read (GET of a key, not a listing) among recorded requests."""
    return [path for method, path, query in requests
            if method == "GET" and path.count("/") >= 2 and "list-type" not in query and not path.endswith("/")]


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory) -> S3Server:
    """`python -m moto.server` on a free loopback port for the session; AWS_* point at dummy credentials
    (moto accepts any) so every process started by the tests finds some in the standard chain."""
    import socket
    import time
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    recording = tmp_path_factory.mktemp("moto") / "recording.jsonl"
    saved = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")}
    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1")
    env = dict(os.environ, MOTO_RECORDER_FILEPATH=str(recording))
    env.pop("MOTO_ENABLE_RECORDING", None)
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=2).read()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto server did not start on {endpoint}") from None
                time.sleep(0.1)
        recording.touch()
        yield S3Server(endpoint, recording)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture()
def bucket(s3_server) -> str:
    """A new, empty bucket on the session's S3 server."""
    import uuid

    name = f"t-{uuid.uuid4().hex[:12]}"
    s3_server.client().create_bucket(Bucket=name)
    return name


@pytest.fixture()
def opts(s3_server):
    """Storage options that reach the session's S3 server."""
    from jobs.sources.storage import StorageOptions

    return StorageOptions(endpoint_url=s3_server.endpoint, region="us-east-1")
