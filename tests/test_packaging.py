"""`pip install .` works outside the checkout: the wheel carries the SQL migrations, the default configs,
the row templates and the QA report's page template, and an installed corpusmill ingests, reports and
searches from any directory.

The slow tests build the wheel the way docker/ does (no build isolation: no network) from a copy of the
source, install it into a fresh venv outside the repository that sees the dev venv's dependencies but
not its editable corpusmill, and run the installed `corpusmill` from a temporary directory.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

from jobs.config import JobConfig, load_config
from tests.conftest import CORPUS, REPO, stop_ray_under

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))


# ---- cheap checks ------------------------------------------------------------------------------

def test_package_list_covers_the_source_tree():
    """`packages` is a list (a mapped package cannot come from `packages.find`): nothing under jobs/ or
    configs/ may be left out of it, or the wheel would silently lack it."""
    st = PYPROJECT["tool"]["setuptools"]
    assert st["package-dir"] == {"jobs.configs": "configs"}

    def dirs(root: Path, name: str) -> set[str]:
        return {name} | {".".join([name, *d.relative_to(root).parts]) for d in root.rglob("*")
                         if d.is_dir() and d.name != "__pycache__"}

    assert set(st["packages"]) == dirs(REPO / "jobs", "jobs") | dirs(REPO / "configs", "jobs.configs")


def _dist_name(requirement: str) -> str:
    return re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9._-]+", requirement).group(0)).lower()


_TOP_LEVEL_IMPORTS = """
import ast, json, sys
from pathlib import Path
modules = set()
for path in [*Path(sys.argv[1], "jobs").rglob("*.py"), *Path(sys.argv[1], "ops").rglob("*.py")]:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            modules |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level:
            modules.add(node.module.split(".")[0])
print(json.dumps(sorted(modules)))
"""


def test_every_package_the_code_imports_is_declared():
    """A package arriving only through another one's dependencies goes when that one stops needing it: each
    top-level import under jobs/ and ops/ (late ones too) is in `dependencies` or an extra."""
    project = PYPROJECT["project"]
    declared = {_dist_name(r) for r in project["dependencies"]}
    declared |= {_dist_name(r) for extra in project["optional-dependencies"].values() for r in extra}
    # Parsed in a child interpreter: CPython 3.11's AST builder keeps its recursion depth per interpreter,
    # so an ast.parse here races threads a test run left building ASTs (tests/test_layout.py, _trees).
    found = subprocess.run([sys.executable, "-c", _TOP_LEVEL_IMPORTS, str(REPO)], check=True, capture_output=True,
                           text=True).stdout
    modules = set(json.loads(found)) - set(sys.stdlib_module_names) - {"jobs", "ops", "tests"}
    dists = metadata.packages_distributions()
    undeclared = {m: dists.get(m) for m in modules if not {_dist_name(d) for d in dists.get(m, [])} & declared}
    assert undeclared == {}


def test_the_gpu_pipeline_plugin_is_an_extra_that_dev_installs():
    extras = PYPROJECT["project"]["optional-dependencies"]
    plugins = {"spacy-curated-transformers", "spacy-transformers"}  # en_core_web_trf 3.7+; pipelines before
    assert not plugins & {_dist_name(r) for r in PYPROJECT["project"]["dependencies"]}
    assert {_dist_name(r) for r in extras["gpu"]} == plugins
    assert plugins <= {_dist_name(r) for r in extras["dev"]}  # their tests run on the CPU
    # en_core_web_trf 3.8 declares spacy-curated-transformers>=0.2.2,<1.0.0; 2.x is for spaCy 4 (thinc 9).
    assert "spacy-curated-transformers>=0.2.2,<1.0.0" in extras["gpu"]


def test_every_shipped_config_loads_and_finds_the_shipped_templates(tmp_path, monkeypatch):
    from jobs.defaults import default_config, templates_dir

    monkeypatch.chdir(tmp_path)  # relative paths must not depend on the working directory
    shipped = sorted((REPO / "configs").glob("*.yaml"))
    assert {p.name for p in shipped} >= {"local.yaml", "gpu.yaml", "baseline-naive.yaml"}
    for path in shipped:
        assert load_config(path).excel.templates_dir == templates_dir() == (REPO / "configs" / "templates").resolve()
        assert default_config(path.name) == path.resolve()
    assert JobConfig().excel.templates_dir == templates_dir()  # no config file: the shipped templates


def test_templates_dir_is_relative_to_the_config_file_and_must_exist(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    conf = tmp_path / "conf"
    shutil.copytree(REPO / "configs" / "templates", conf / "tmpl")
    (conf / "c.yaml").write_text("excel:\n  templates_dir: tmpl\n")
    cfg = load_config(conf / "c.yaml")
    assert cfg.excel.templates_dir == (conf / "tmpl").resolve()
    # The fingerprint hashes the templates, not where they are: the same files elsewhere, the same chunks.
    assert cfg.fingerprint() == JobConfig().fingerprint()
    (conf / "tmpl" / "stanley-cups.yaml").write_text((conf / "tmpl" / "stanley-cups.yaml").read_text() + "\n# edited\n")
    assert load_config(conf / "c.yaml").fingerprint() != JobConfig().fingerprint()

    (conf / "missing.yaml").write_text("excel:\n  templates_dir: nowhere\n")
    with pytest.raises(ValueError, match=r"excel\.templates_dir .*conf/nowhere"):
        load_config(conf / "missing.yaml")


def test_without_a_checkout_the_cli_uses_the_shipped_local_yaml(tmp_path, monkeypatch):
    from argparse import Namespace

    from jobs.cli import _config_path
    from jobs.defaults import default_config

    monkeypatch.chdir(tmp_path)
    assert _config_path(Namespace(config=None)) == str(default_config("local.yaml"))
    assert _config_path(Namespace(config="mine.yaml")) == "mine.yaml"
    monkeypatch.chdir(REPO)
    assert _config_path(Namespace(config=None)) == "configs/local.yaml"


# ---- the wheel, installed outside the checkout ----------------------------------------------------

def _source_copy(dst: Path) -> Path:
    """What the wheel is built from (as docker/ copies it), away from the checkout's build/ and egg-info."""
    dst.mkdir(parents=True)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, dst / name)
    for name in ("jobs", "configs"):
        shutil.copytree(REPO / name, dst / name, ignore=shutil.ignore_patterns("__pycache__"))
    return dst


def _venv(path: Path) -> Path:
    """A venv whose site-packages links every distribution of the dev venv's but corpusmill (the editable
    install's finder, .pth and dist-info), so only what is installed into it next provides `jobs`."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, timeout=120)
    query = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    new_site = Path(subprocess.run([str(path / "bin" / "python"), "-c", query], capture_output=True, text=True,
                                   check=True).stdout.strip())
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if entry.name.startswith(("__editable__", "corpusmill", "__pycache__")):
            continue
        (new_site / entry.name).symlink_to(entry)
    return path / "bin"


def _run(cmd: list, cwd: Path, env: dict | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    out = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, f"{cmd}\n{out.stdout[-3000:]}\n{out.stderr[-5000:]}"
    return out


def _clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("RAY_ADDRESS", "PYTHONPATH", "DATABASE_URL", "DATABASE_URL_FILE", "VIRTUAL_ENV")}
    env.update(TOKENIZERS_PARALLELISM="false", **extra)
    return env


@pytest.mark.slow
def test_the_wheel_ingests_and_searches_outside_the_checkout(tmp_path, pg_url):
    src = _source_copy(tmp_path / "src")
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
          "-w", tmp_path / "dist", "."], cwd=src)
    wheel, = (tmp_path / "dist").glob("corpusmill-*.whl")
    bin_ = _venv(tmp_path / "venv")
    _run([bin_ / "python", "-m", "pip", "install", "--no-deps", "--no-index", "-q", wheel], cwd=tmp_path)

    work = tmp_path / "work"  # the working directory: no configs/, no jobs/
    notes = work / "notes"
    notes.mkdir(parents=True)
    shutil.copy(CORPUS / "hugo" / "server.md", notes)
    shutil.copy(CORPUS / "workbooks" / "stanley-cups.xlsx", notes)
    ray_tmp = Path(tempfile.mkdtemp(prefix="cmpkg-", dir="/tmp"))  # Unix socket paths must stay short
    env = _clean_env(CORPUSMILL_HOME=str(tmp_path / "home"), DATABASE_URL=pg_url, RAY_TMPDIR=str(ray_tmp))

    where = json.loads(_run([bin_ / "python", "-c", "import json, jobs, jobs.defaults, jobs.store.pgvector as p, "
                             "jobs.tools.report as r; print(json.dumps([jobs.__file__, str(jobs.defaults.configs_dir()), "
                             "str(p.MIGRATIONS_DIR), r.__file__]))"], cwd=work, env=env).stdout)
    site = str(tmp_path / "venv" / "lib")
    assert all(w.startswith(site) for w in where), where
    assert Path(where[1], "local.yaml").is_file() and len(list(Path(where[2]).glob("*.sql"))) >= 3
    # ingest logs a report failure rather than failing the run, so a wheel without the page template would pass below
    assert Path(where[3]).with_name("templates").joinpath("report.html.j2").is_file()

    corpusmill = bin_ / "corpusmill"
    try:
        out = _run([corpusmill, "ingest", "--input", notes, "--collection", "pkgtest"], cwd=work, env=env, timeout=600)
        assert "files: 2 added, 0 updated, 0 retried, 0 skipped, 0 deleted, 0 failed" in out.stdout, out.stdout
    finally:
        stop_ray_under(ray_tmp)
        shutil.rmtree(ray_tmp, ignore_errors=True)
    st = json.loads(_run([corpusmill, "status", "--collection", "pkgtest", "--json"], cwd=work, env=env).stdout)
    assert st["documents"] == {"done": 2, "failed": 0, "pending": 0} and st["chunks"] > 2
    hits = json.loads(_run([corpusmill, "search", "--collection", "pkgtest", "-k", "1", "--json",
                            "How many Stanley Cups have the Blues won?"], cwd=work, env=env).stdout)["hits"]
    # The packaged stanley-cups template rendered the row: the workers found the installed templates.
    assert len(hits) == 1 and hits[0]["source_path"] == "stanley-cups.xlsx", hits
    assert "The Blues hockey team (STL) has won" in hits[0]["text"], hits


@pytest.mark.slow
def test_an_editable_install_maps_configs_too(tmp_path):
    src = _source_copy(tmp_path / "src")
    bin_ = _venv(tmp_path / "venv")
    _run([bin_ / "python", "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index", "-q", "-e", src],
         cwd=tmp_path)
    out = _run([bin_ / "python", "-c", "import jobs, jobs.configs, jobs.defaults; "
                "print(jobs.__file__); print(jobs.defaults.templates_dir())"], cwd=tmp_path, env=_clean_env())
    assert out.stdout.split() == [str(src / "jobs" / "__init__.py"), str(src / "configs" / "templates")]
