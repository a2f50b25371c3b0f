"""ops/submit.sh: a database URL on the command line never reaches a cluster job, however it is spelled."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.conftest import REPO


@pytest.mark.parametrize("args", [["--database-url", "postgresql://u:hunter2@db/x"],
                                  ["--database-url=postgresql://u:hunter2@db/x"],
                                  ["--database", "postgresql://u:hunter2@db/x"],  # argparse's abbreviations
                                  ["--d=postgresql://u:hunter2@db/x"]])
def test_a_database_url_option_is_refused_in_any_spelling_argparse_accepts(args):
    env = dict(os.environ, RAY_ADDRESS="http://127.0.0.1:1")
    out = subprocess.run([str(REPO / "ops" / "submit.sh"), "status", *args], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 2 and "do not pass --database-url" in out.stderr
    assert "hunter2" not in out.stdout + out.stderr
