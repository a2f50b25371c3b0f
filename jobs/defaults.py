"""Where the shipped defaults are: the job configs and row templates of the checkout's `configs/`.

pyproject.toml installs `configs/` as the package `jobs.configs` (setuptools `package-dir`), so an
installed corpusmill (a wheel, or `pip install -e .`) finds them without the checkout. A bare source
tree on sys.path, with no install behind it (`ray job submit --working-dir .` puts the uploaded
checkout first on every node), has no `jobs.configs`: there `configs/` is the directory beside `jobs/`.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def configs_dir() -> Path:
    """The directory holding local.yaml, gpu.yaml, baseline-naive.yaml and templates/."""
    try:
        root = resources.files("jobs.configs")
    except ModuleNotFoundError:
        return Path(__file__).resolve().parents[1] / "configs"
    if not isinstance(root, Path):  # a zip import: the pipeline needs real files, read by every worker
        raise RuntimeError(f"corpusmill's packaged configs are not on the filesystem ({root}); install it unzipped")
    return root.resolve()


def default_config(name: str = "local.yaml") -> Path:
    """The shipped job config `name` (local.yaml, gpu.yaml, baseline-naive.yaml)."""
    path = configs_dir() / name
    if not path.is_file():
        shipped = sorted(p.name for p in configs_dir().glob("*.yaml"))
        raise FileNotFoundError(f"no shipped config {name!r} in {configs_dir()}; shipped: {', '.join(shipped)}")
    return path


def templates_dir() -> Path:
    """The shipped row templates (excel.templates_dir when a config does not name one)."""
    return configs_dir() / "templates"
