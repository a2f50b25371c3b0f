"""The README's command list agrees with the command line itself: every command and option it shows
exists, every command exists in it, and docs/commands.md says something of each."""

from __future__ import annotations

import argparse
import re

import pytest

from jobs.cli import build_parser
from tests.conftest import REPO

# An option as the README writes one: `--output DIR`, `[--json]`, `-k 5`; not `bench-embedders` or `MODEL#x-y`.
_OPTION = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")
_ALTERNATIVES = re.compile(r"(?<![\w-])([a-z][\w-]*(?:\|[a-z][\w-]*)+)(?![\w-])")  # start|stop|url


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {s for action in parser._actions for s in action.option_strings}


def _choices(parser: argparse.ArgumentParser) -> set[str]:
    return {str(c) for action in parser._actions if action.choices and not isinstance(action, argparse._SubParsersAction)
            for c in action.choices}


def readme_commands() -> list[tuple[str, str]]:
    """(first line's words after `corpusmill`, the whole entry without comments) per command of the
    README's Commands block; an entry runs on over the indented lines below it."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## Commands\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"^```[^\n]*\n(.*?)^```", section, re.S | re.M).group(1)
    entries: list[list[str]] = []
    for line in block.splitlines():
        code = re.split(r"\s#(?:\s|$)", line, maxsplit=1)[0].rstrip()
        if code.startswith("corpusmill "):
            entries.append([code.removeprefix("corpusmill ")])
        elif code.strip() and entries and line[:1].isspace():
            entries[-1].append(code.strip())
    return [(lines[0], " ".join(lines)) for lines in entries]


def _entry_parser(entry: str) -> tuple[list[str], argparse.ArgumentParser, str]:
    """The command words an entry names (`templates preview`), the parser they lead to, and the rest."""
    words, parser, rest = [], build_parser(), entry
    while True:
        subs = _subcommands(parser)
        name, _, after = rest.partition(" ")
        if not subs or name not in subs:
            return words, parser, rest
        words.append(name)
        parser, rest = subs[name], after.strip()


def test_the_readme_lists_commands():
    assert len(readme_commands()) >= 10


@pytest.mark.parametrize("first, entry", readme_commands(), ids=lambda v: v.split(" ")[0])
def test_each_readme_command_and_its_options_exist(first, entry):
    words, parser, rest = _entry_parser(entry)
    assert words, f"README names `corpusmill {first.split()[0]}`, which `corpusmill --help` does not list"
    assert not _subcommands(parser), f"README: `corpusmill {' '.join(words)}` needs one of {sorted(_subcommands(parser))}"
    unknown = sorted(set(_OPTION.findall(rest)) - _options(parser))
    assert unknown == [], f"README shows {unknown} for `corpusmill {' '.join(words)}`, whose parser has no such option"
    shown = {c for alt in _ALTERNATIVES.findall(rest) for c in alt.split("|")}
    assert shown <= _choices(parser), f"README shows {sorted(shown - _choices(parser))} for `corpusmill {' '.join(words)}`"


def test_every_command_is_in_the_readme():
    shown = {" ".join(_entry_parser(entry)[0]) for _, entry in readme_commands()}
    commands = set()
    for name, sub in _subcommands(build_parser()).items():
        nested = _subcommands(sub)
        commands |= {f"{name} {n}" for n in nested} if nested else {name}
    assert sorted(commands - shown) == [], "add these to the README's Commands block"


def test_docs_commands_mentions_every_command():
    text = (REPO / "docs" / "commands.md").read_text(encoding="utf-8")
    missing = [name for name in _subcommands(build_parser())
               if not re.search(rf"`(?:corpusmill )?{re.escape(name)}(?![\w-])", text)]
    assert missing == [], "say something of these in docs/commands.md"
