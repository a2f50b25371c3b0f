"""The README's command list agrees with the command line itself: each entry of its Commands block,
read as the synopsis it is (every optional part, each alternative, placeholders filled with values of the
type the option takes), parses with `corpusmill`'s own parser into that command; every command is in it;
docs/commands.md says something of each; the exit codes it lists are the ones the CLI returns."""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import re

import pytest

from jobs.cli import build_parser
from tests.conftest import REPO

# A placeholder as the README writes one: DIR, DIR|URI, RUN_DIR, KEY=VALUE, M1.
_PLACEHOLDER = re.compile(r"^(?:[A-Z][A-Z0-9_]*(?:\|[A-Z][A-Z0-9_]*)*|[A-Z]+=[A-Z]+)$")


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


def _tokens(entry: str) -> list[str]:
    entry = entry.replace("...same selectors...", " ")
    return [t for t in re.split(r"(\[|\]|\(|\)|\s\|\s|\s+)", entry) if t and t.strip()]


def _alternatives(tokens: list[str], i: int, close: str | None) -> tuple[list[list[str]], int]:
    """The argument lists a group stands for, from tokens[i] to its `close`: one per alternative of each
    `A | B` inside it (and of each `a|b` word), every optional part taken."""
    variants, current = [], [[]]
    while i < len(tokens):
        t = tokens[i].strip()
        if t == close:
            return variants + current, i + 1
        if t == "|":
            variants, current, i = variants + current, [[]], i + 1
            continue
        if t in ("[", "("):
            inner, i = _alternatives(tokens, i + 1, "]" if t == "[" else ")")
        else:
            inner = [[w] for w in t.split("|")] if "|" in t and not _PLACEHOLDER.match(t) else [[t]]
            i += 1
        current = [a + b for a, b in itertools.product(current, inner)]
    return variants + current, i


def _value(action: argparse.Action | None, placeholder: str) -> str:
    """A value the parser takes for `placeholder` after `action` (None: a positional)."""
    if action is not None and action.choices:
        return str(next(iter(action.choices)))
    if "=" in placeholder:
        return "tags=ops"
    kind = getattr(action, "type", None)
    return "0.5" if kind is float else "2" if kind is not None and kind is not str else "x"


def invocations(entry: str) -> list[list[str]]:
    """The argument lists of one README entry, placeholders filled (see the module docstring)."""
    variants, _ = _alternatives(_tokens(entry), 0, None)
    out = []
    for words in variants:
        _, parser, _ = _entry_parser(" ".join(words))
        options = {s: a for a in parser._actions for s in a.option_strings}
        argv, action, left = [], None, 0
        for w in words:
            if w.startswith("-") and w in options:
                action = options[w]
                left = {None: 1, "?": 1, "*": 99, "+": 99}.get(action.nargs, action.nargs) if action.nargs != 0 else 0
                argv.append(w)
            elif w == "...":  # more of the same, or (`--config ...`) the option's value
                if left:
                    argv.append(_value(action, w))
                    left = 0
            elif _PLACEHOLDER.match(w):
                argv.append(_value(action if left else None, w))
                left = max(0, left - 1)
            else:
                argv.append(w)
                left = max(0, left - 1)
        out.append(argv)
    return out


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


@pytest.mark.parametrize("first, entry", readme_commands(), ids=lambda v: v.split(" ")[0])
def test_each_readme_command_parses_with_the_real_parser(first, entry):
    words, parser, _ = _entry_parser(entry)
    assert words, f"README names `corpusmill {first.split()[0]}`, which `corpusmill --help` does not list"
    assert not _subcommands(parser), f"README: `corpusmill {' '.join(words)}` needs one of {sorted(_subcommands(parser))}"
    for argv in invocations(entry):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            try:
                args = build_parser().parse_args(argv)
            except SystemExit:
                pytest.fail(f"README: `corpusmill {' '.join(argv)}` does not parse: {err.getvalue().strip()}")
        assert args.command == words[0]


def test_a_synopsis_that_the_parser_refuses_fails():
    """The check above can fail: an option the command lacks, a value outside its choices, a required
    option left out."""
    for wrong in ("status [--colection NAME]", "search [--mode M] QUERY --mode nope", "reembed [--drop-old]"):
        for argv in invocations(wrong):
            with contextlib.redirect_stderr(io.StringIO()), pytest.raises(SystemExit):
                build_parser().parse_args(argv)


def test_every_command_is_in_the_readme():
    shown = {" ".join(_entry_parser(entry)[0]) for _, entry in readme_commands()}
    commands = set()
    for name, sub in _subcommands(build_parser()).items():
        nested = _subcommands(sub)
        commands |= {f"{name} {n}" for n in nested} if nested else {name}
    assert sorted(commands - shown) == [], "add these to the README's Commands block"


def test_the_exit_codes_listed_are_the_ones_the_cli_returns():
    """The README, docs/outputs.md and `corpusmill --help` list the same exit codes, and those are what
    jobs/cli.py's main can return (jobs/exit_status.py's among them): 0-4 from the commands and the error
    paths, 130 on an interrupt, 143 on SIGTERM, 141 when the output's reader went away."""
    source = "".join((REPO / "jobs" / name).read_text(encoding="utf-8") for name in ("cli.py", "exit_status.py"))
    returned = {int(c) for c in re.findall(r"return (\d+)\b", source)} | {1, 3}  # 1 and 3: cmd_ingest's result
    assert {130, 141, 143} <= returned
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    outputs = (REPO / "docs" / "outputs.md").read_text(encoding="utf-8")
    for name, text in (("README.md", readme), ("docs/outputs.md", outputs), ("--help", build_parser().epilog)):
        listed = re.split(r"\n\n|\n- ", text.split("Exit codes:", 1)[1], maxsplit=1)[0]  # to the paragraph's end
        codes = {int(c) for c in re.findall(r"(?<![\w$.-])(\d+) (?:[a-z(]|\*)", " ".join(listed.split()))}
        assert codes == {0, 1, 2, 3, 4, 130, 141, 143}, (name, sorted(codes))


def test_docs_commands_mentions_every_command():
    text = (REPO / "docs" / "commands.md").read_text(encoding="utf-8")
    missing = [name for name in _subcommands(build_parser())
               if not re.search(rf"`(?:corpusmill )?{re.escape(name)}(?![\w-])", text)]
    assert missing == [], "say something of these in docs/commands.md"
