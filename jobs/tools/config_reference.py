"""`python -m jobs.tools.config_reference`: the configuration reference, every section and key of a job
config with its type, default and description, as Markdown generated from the models in jobs/config.py.

docs/config-reference.md is this module's output (`make docs` writes it); tests/tools/test_config_reference.py
fails when the file and the models disagree."""

from __future__ import annotations

import inspect
import sys
import types
import typing
from pathlib import Path

import annotated_types
import yaml
from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo

from jobs.config import JobConfig
from jobs.config_keys import section_model
from jobs.defaults import configs_dir

COMMAND = "python -m jobs.tools.config_reference > docs/config-reference.md"

_SCALARS = {str: "string", int: "integer", float: "number", bool: "boolean", Path: "path",
            SecretStr: "string (secret)", type(None): "null", dict: "mapping"}
_BOUNDS = {annotated_types.Ge: "≥", annotated_types.Gt: ">", annotated_types.Le: "≤", annotated_types.Lt: "<"}


def _either(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def type_name(annotation: object) -> str:
    """A field's type in words: `integer`, `list of string`, `` `auto`, integer or null ``."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return _either([f"`{a}`" for a in args])
    if origin in (typing.Union, types.UnionType):
        return _either([type_name(a) for a in args])
    if origin is list:
        return f"list of {type_name(args[0])}" if args else "list"
    if origin is dict:
        return "mapping"
    return _SCALARS.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _bounds(field: FieldInfo) -> str:
    found = [f"{sign} {getattr(m, attr)}" for m in field.metadata for kind, sign in _BOUNDS.items()
             if isinstance(m, kind) for attr in ("ge", "gt", "le", "lt") if hasattr(m, attr)]
    return f" ({', '.join(found)})" if found else ""


def default_text(value: object) -> str:
    """A default as it would be written in the YAML file; the shipped templates by their place in configs/."""
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json", by_alias=True)
    if isinstance(value, Path):
        if value.is_relative_to(configs_dir()):
            return f"the shipped `configs/{value.relative_to(configs_dir()).as_posix()}`"
        value = str(value)
    text = yaml.safe_dump(value, default_flow_style=True, allow_unicode=True, width=10**9, sort_keys=False)
    return "`" + text.removesuffix("...\n").strip() + "`"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _about(field: FieldInfo | None, model: type[BaseModel]) -> str:
    """What a section is for: its field's description, else its model's docstring."""
    if field is not None and field.description:
        return field.description
    doc = model.__doc__ or ""
    return "" if doc == inspect.getdoc(BaseModel) else inspect.cleandoc(doc)


def _section(path: str, model: type[BaseModel], value: BaseModel, field: FieldInfo | None, level: int) -> list[str]:
    """One section: its heading, what it is for, a table of its keys, then its own sections."""
    title = f"`{path}`" if path else "Top level"
    lines = [f"{'#' * level} {title}", ""]
    about = _about(field, model) if path else "Keys outside any section."
    if about:
        lines += [" ".join(about.split()), ""]
    rows, nested = [], []
    for name, f in model.model_fields.items():
        key = f.alias or name
        child = section_model(f.annotation)
        if child is not None and isinstance(getattr(value, name), BaseModel):
            nested.append((f"{path}.{key}" if path else key, child, getattr(value, name), f))
            continue
        rows.append(f"| `{key}` | {_cell(type_name(f.annotation) + _bounds(f))} | {_cell(default_text(getattr(value, name)))} "
                    f"| {_cell(f.description or '')} |")
    if rows:
        lines += ["| Key | Type | Default | Description |", "| --- | --- | --- | --- |", *rows, ""]
    for child_path, child, child_value, f in nested:
        lines += _section(child_path, child, child_value, f, min(level + 1, 4) if path else level)
    return lines


def reference() -> str:
    """The whole reference, as docs/config-reference.md holds it."""
    head = [
        "# Configuration reference",
        "",
        f"Generated from `jobs/config.py`; do not edit. `make docs` regenerates it (`{COMMAND}`).",
        "",
        "Every key of a job config (`--config FILE`, YAML), section by section, with its type, its default and",
        "what it does. Every key is optional; a key missing from the file takes the default shown, and an unknown",
        "key is an error that names the key it was probably meant to be. Which configs ship and what the pipeline",
        "fingerprint covers: [Configuration](configuration.md).",
        "",
    ]
    return "\n".join(head + _section("", JobConfig, JobConfig(), None, 2)).rstrip() + "\n"


if __name__ == "__main__":
    sys.stdout.write(reference())
