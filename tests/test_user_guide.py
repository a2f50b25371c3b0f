"""The README's path for a new user, run as written: ingest an own folder of notes (Markdown with front
matter, a workbook), search it from the CLI (with a front-matter filter), from Python and through
`corpusmill serve` — its JSON and its page in a real headless Chromium (screenshots kept outside the
repository, under pytest's temporary directory; their paths are printed)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import redirect_stdout
from io import StringIO
from pathlib import Path

import pytest

from tests.conftest import CORPUS, REPO

pytestmark = pytest.mark.slow
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
NOTES = {
    "keys.md": "---\ntitle: Rotating API keys\ntags: [security, ops]\nauthor: Ana\n---\n# Rotating API keys\n\n"
               "Rotate the API keys every ninety days. Generate a new key in the console, deploy it, then revoke "
               "the old key.\n\n## When a key leaks\n\nRevoke the leaked key at once, then rotate every key that "
               "shares its scope and read the audit log for its use.\n",
    "garden/tomatoes.md": "---\ntags: gardening\n---\n# Tomatoes\n\nWater tomatoes deeply twice a week and stake "
                          "them early. The keys to a good harvest are sun and patience.\n",
    "ops/deploys.md": "---\ntags: [ops]\n---\n# Deploys\n\nDeploy from the main branch only. Rotate the deploy "
                      "tokens when someone leaves the team.\n",
}


def readme_block(heading: str, lang: str) -> str:
    """The first ```lang block under `## heading` in README.md."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return re.search(rf"```{lang}\n(.*?)```", section, re.S).group(1)


def readme_commands() -> list[list[str]]:
    """The README's five-minute commands that call corpusmill, with its comments dropped."""
    out = []
    for line in readme_block("Your own notes in five minutes", "sh").splitlines():
        line = line.split("  #", 1)[0].strip()
        if line.startswith("corpusmill "):
            out.append(shlex.split(line))
    return out


@pytest.fixture(scope="module")
def guide(tmp_path_factory, pg_url, cm_home):
    """The README's own folder of notes (~/notes), ingested by the README's first command (here, so that each
    test that reads the collection runs alone too)."""
    root = tmp_path_factory.mktemp("user")
    notes = root / "notes"
    for name, text in NOTES.items():
        (notes / name).parent.mkdir(parents=True, exist_ok=True)
        (notes / name).write_text(text, encoding="utf-8")
    shutil.copy(CORPUS / "workbooks" / "stanley-cups.xlsx", notes / "cups.xlsx")
    # As the README's user runs it: no RAY_ADDRESS (4 documents run in process, jobs/in_process.py).
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(CORPUSMILL_HOME=str(cm_home), TOKENIZERS_PARALLELISM="false")
    commands = readme_commands()
    assert [c[1] for c in commands] == ["ingest", "search", "search", "status", "ingest", "serve"]
    return {"root": root, "env": env, "commands": commands, "ingested": run(commands[0], env, root)}


def run(argv: list[str], env: dict, cwd: Path) -> subprocess.CompletedProcess:
    """`argv` (a README line) run from `cwd`, the user's home: `~/notes` is the notes folder there."""
    argv = [str(cwd) + a[1:] if a.startswith("~/") else a for a in argv]
    return subprocess.run([sys.executable, "-m", "jobs.cli", *argv[1:]], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=600)


def test_the_readme_path_ingests_searches_filters_and_reruns(guide):
    env, cwd = guide["env"], guide["root"]  # run from the user's home, not the checkout
    _, search, filtered, status, again, _ = guide["commands"]
    out = guide["ingested"]
    assert out.returncode == 0, out.stdout + out.stderr
    assert "4 added" in out.stdout and "0 failed" in out.stdout

    out = run(search, env, cwd)
    assert out.returncode == 0, out.stderr
    assert re.search(r"^ 1\. [0-9.]+ +keys\.md", out.stdout, re.M), out.stdout

    out = run(filtered + ["--json"], env, cwd)
    assert out.returncode == 0, out.stderr
    hits = json.loads(out.stdout)["hits"]
    assert hits and all("security" in h["metadata"]["tags"] for h in hits)
    assert [h["score"] for h in hits] == sorted((h["score"] for h in hits), reverse=True)
    first = hits[0]
    assert first["source_path"] == "keys.md" and first["metadata"]["author"] == "Ana"
    source = (cwd / "notes" / "keys.md").read_text(encoding="utf-8")
    assert "rotate" in source[first["char_start"]:first["char_end"]].lower()
    marked = [first["snippet"][a:b].lower() for a, b in first["highlights"]]
    assert marked and all(w.startswith(("rotat", "key")) for w in marked)

    out = run(status, env, cwd)
    assert out.returncode == 0, out.stderr
    assert f"data: {env['CORPUSMILL_HOME']}" in out.stdout and "4 done, 0 failed, 0 pending" in out.stdout

    out = run(again, env, cwd)
    assert out.returncode == 0 and "0 added, 0 updated" in out.stdout, out.stdout + out.stderr


def test_the_readme_python_example_and_the_api(guide, capsys):
    os.environ["CORPUSMILL_HOME"] = guide["env"]["CORPUSMILL_HOME"]
    printed = StringIO()
    with redirect_stdout(printed):
        exec(readme_block("Your own notes in five minutes", "python"), {})
    lines = [line for line in printed.getvalue().splitlines() if line.strip()]
    assert lines and all(" keys.md " in line for line in lines)

    from jobs import Hit, open_collection

    with open_collection("mine") as notes:
        hits = notes.search("who won the Stanley Cup most often", k=3)
        assert isinstance(hits[0], Hit) and hits[0].source_path == "cups.xlsx" and hits[0].sheet and hits[0].row
        assert hits[0].metadata["sheets"]
        assert [h.source_path for h in notes.search("rotate keys", k=5, filters=["path=ops/*"])] == ["ops/deploys.md"]
        either = notes.search("rotate keys", k=5, filters={"tags": ["gardening", "security"]})
        assert {h.source_path for h in either} == {"keys.md", "garden/tomatoes.md"}
        assert notes.search("quantum chromodynamics lattice gauge", k=5, min_similarity=0.5) == []
        assert "tags" in notes.metadata_keys()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(url: str, proc: subprocess.Popen, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else "serve exited"
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"{url} did not answer in {timeout} s")


@pytest.fixture(scope="module")
def service(guide):
    """The README's `corpusmill serve`, on a free port."""
    port = free_port()
    argv = guide["commands"][-1] + ["--port", str(port)]
    proc = subprocess.Popen([sys.executable, "-m", "jobs.cli", *argv[1:]], env=guide["env"], cwd=guide["root"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}/"
    try:
        wait_for(base + "collection", proc)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_the_service_answers_what_search_json_prints(guide, service):
    query = "rotate the keys"
    cli = run(["corpusmill", "search", "--collection", "mine", "--json", "--filter", "tags=ops", query],
              guide["env"], guide["root"])
    assert cli.returncode == 0, cli.stderr
    with urllib.request.urlopen(service + "search?" + urllib.parse.urlencode({"q": query, "filter": "tags=ops"})) as r:
        served = json.loads(r.read())
    assert served == json.loads(cli.stdout)
    with pytest.raises(urllib.error.HTTPError) as bad:
        urllib.request.urlopen(service + "search?q=x&filter=nonsense")
    assert bad.value.code == 422


@pytest.mark.skipif(CHROMIUM is None and not os.environ.get("CORPUSMILL_REQUIRE_BROWSER"),
                    reason="no Chromium on this machine (apt-get install chromium; .ci/run installs it)")
def test_the_search_page_in_headless_chromium(service, tmp_path_factory):
    from playwright.sync_api import sync_playwright

    assert CHROMIUM, "CORPUSMILL_REQUIRE_BROWSER is set but no chromium is installed"
    shots = tmp_path_factory.mktemp("screenshots")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--no-first-run"])
        try:
            page = browser.new_page(viewport={"width": 1100, "height": 800})
            page.goto(service)
            page.wait_for_selector("#coll:has-text('mine')")
            page.fill("#q", "how do I rotate the keys")
            page.click("#go")
            page.wait_for_selector(".hit")
            assert page.locator(".hit .path").first.inner_text() == "keys.md"
            assert page.locator(".hit mark").count() > 0  # the matching words highlighted
            assert "score" in page.locator(".hit .scores").first.inner_text()
            assert "chars" in page.locator(".hit .loc").first.inner_text()
            page.screenshot(path=str(shots / "search.png"), full_page=True)

            page.locator(".hit .chip", has_text="tags: security").first.click()  # filter by a front-matter tag
            page.wait_for_selector("#filters .chip:has-text('tags=security')")
            page.wait_for_function("document.querySelectorAll('.hit').length === 1")
            assert page.locator(".hit .path").all_inner_texts() == ["keys.md"]
            assert "filter=tags%3Dsecurity" in page.url
            page.screenshot(path=str(shots / "filtered.png"), full_page=True)
        finally:
            browser.close()
    print(f"screenshots: {shots}")
