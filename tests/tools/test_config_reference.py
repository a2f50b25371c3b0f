"""docs/config-reference.md is what jobs/tools/config_reference.py generates from the config models, and
it covers every key with the default a config without that key really gets."""

from __future__ import annotations

import re
from typing import Literal

from jobs.config import JobConfig
from jobs.config_keys import keys_of
from jobs.tools.config_reference import COMMAND, reference, type_name
from tests.conftest import REPO

DOC = REPO / "docs" / "config-reference.md"


def _rows(text: str) -> dict[str, list[str]]:
    """`section.key` -> its table row's cells, read back from the Markdown."""
    rows, section = {}, ""
    for line in text.splitlines():
        heading = re.match(r"^#{2,4} (?:`(.+)`|Top level)$", line)
        if heading:
            section = heading.group(1) or ""
        elif line.startswith("| `"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            rows[f"{section}.{cells[0].strip('`')}".lstrip(".")] = cells
    return rows


def _leaf_keys(model, prefix="") -> list[str]:
    out = []
    for key, section in keys_of(model).items():
        out += _leaf_keys(section, f"{prefix}{key}.") if section is not None else [prefix + key]
    return out


def test_the_reference_is_current():
    assert DOC.read_text(encoding="utf-8") == reference(), f"docs/config-reference.md is stale: run `{COMMAND}` (make docs)"


def test_every_key_is_in_the_reference_with_a_type_and_a_description():
    rows = _rows(reference())
    assert set(rows) == set(_leaf_keys(JobConfig))
    assert [k for k, (_, kind, default, about) in rows.items() if not (kind and default and about)] == []


def test_defaults_are_those_of_each_section_not_of_its_class():
    rows = _rows(reference())
    # One ResourcesConfig class, three defaults: the reference shows what a config without the key gets.
    assert rows["ray.parse.num_cpus"][2] == "`0.5`" and rows["sentences.resources.num_cpus"][2] == "`1.0`"
    assert rows["embedding.resources.batch_size"][2] == "`256`"
    assert rows["database.schema"][2] == "`corpusmill`"  # the key as written in YAML (an alias)
    assert rows["excel.templates_dir"][2] == "the shipped `configs/templates`"  # not this machine's path
    assert rows["chunking.max_tokens"][1] == "integer (≥ 16)"


def test_type_names():
    assert type_name(int | Literal["auto"] | None) == "integer, `auto` or null"
    assert type_name(list[str]) == "list of string"
    assert type_name(Literal["vector", "text"]) == "`vector` or `text`"
