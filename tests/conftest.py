"""Shared fixtures: a real embedded PostgreSQL + pgvector and a real local Ray head, one per session.

Every test works in its own temporary CORPUSMILL_HOME subtree and its own collection, so tests
never see each other's documents or a developer's `.corpusmill/`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "tests" / "data" / "corpus"
BIN = Path(sys.executable).parent


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


@pytest.fixture(scope="session")
def ray_address(cm_home) -> str:
    """A local Ray head shared by every CLI run in the session (saves a Ray start per ingest)."""
    temp = Path("/tmp") / f"cmray-{os.getpid()}"  # Unix socket paths must stay short
    # Ray's token auth: `ray start` writes ~/.ray/auth_token; clients must be told to present it.
    os.environ["RAY_AUTH_MODE"] = "token"
    cmd = [str(BIN / "ray"), "start", "--head", "--num-cpus=6", "--include-dashboard=false",
           "--disable-usage-stats", f"--temp-dir={temp}", "--port=0"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    if out.returncode != 0:
        raise RuntimeError(f"ray start failed:\n{out.stdout}\n{out.stderr}")
    address = None
    for line in (out.stdout + out.stderr).splitlines():
        if "ray start --address=" in line:
            address = line.split("--address=")[1].strip().strip("'\"")
    assert address, out.stdout
    yield address
    subprocess.run([str(BIN / "ray"), "stop", "--force"], capture_output=True, timeout=120)
    shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture()
def corpus(tmp_path) -> Path:
    """A private, writable copy of the bundled corpus."""
    dst = tmp_path / "corpus"
    shutil.copytree(CORPUS, dst)
    return dst


def write_config(path: Path, collection: str, roots: list[Path], **overrides) -> Path:
    """A job config for tests: configs/local.yaml with its input roots and collection replaced."""
    import yaml

    data = yaml.safe_load((REPO / "configs" / "local.yaml").read_text())
    data["collection"] = collection
    data["input"]["roots"] = [str(r) for r in roots]
    data["ray"]["progress_bars"] = False
    for dotted, value in overrides.items():
        node = data
        *parents, leaf = dotted.split("__")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    path.write_text(yaml.safe_dump(data))
    return path
