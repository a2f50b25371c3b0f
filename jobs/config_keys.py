"""Unknown keys in a config file: each named by its full path, with the key the user most likely meant.

A misspelled key would otherwise read as pydantic's "Extra inputs are not permitted"; here it reads
`configs/x.yaml: unknown key chunking.max_tokenz (did you mean chunking.max_tokens?)`."""

from __future__ import annotations

import difflib
import inspect
import typing
from pathlib import Path

from pydantic import BaseModel, ValidationError

from jobs.errors import ConfigError

Model = typing.TypeVar("Model", bound=BaseModel)


def section_model(annotation: object) -> type[BaseModel] | None:
    """The model a field's value is validated by (`X`, `X | None`, `list[X]`), or None for a plain value."""
    if inspect.isclass(annotation) and typing.get_origin(annotation) is None:
        return annotation if issubclass(annotation, BaseModel) else None
    for arg in typing.get_args(annotation):
        found = section_model(arg)
        if found is not None:
            return found
    return None


def keys_of(model: type[BaseModel]) -> dict[str, type[BaseModel] | None]:
    """The keys a section accepts, as written in YAML (a field's alias when it has one), with their sections."""
    return {field.alias or name: section_model(field.annotation) for name, field in model.model_fields.items()}


def _all_paths(model: type[BaseModel], prefix: str = "") -> list[str]:
    out = []
    for key, section in keys_of(model).items():
        out.append(prefix + key)
        if section is not None:
            out.extend(_all_paths(section, f"{prefix}{key}."))
    return out


def suggest(root: type[BaseModel], loc: tuple[str | int, ...]) -> list[str]:
    """Full paths the unknown key at `loc` probably meant: a close spelling among its section's keys, else
    the same key in other sections (a key put under the wrong section). Empty when nothing is close."""
    section: type[BaseModel] | None = root
    for part in loc[:-1]:
        if isinstance(part, int):  # an item of a list of sections: the list's own model
            continue
        section = keys_of(section).get(part) if section is not None else None
    key = str(loc[-1])
    prefix = "".join(f"{p}." for p in loc[:-1] if not isinstance(p, int))
    if section is not None:
        close = difflib.get_close_matches(key, list(keys_of(section)), n=1, cutoff=0.6)
        if close:
            return [prefix + close[0]]
    elsewhere = [p for p in _all_paths(root) if p.rsplit(".", 1)[-1] == key and p != prefix + key]
    return elsewhere[:3]


def describe(exc: ValidationError, root: type[BaseModel], source: str | Path) -> str | None:
    """One line naming every problem of `exc` with the unknown keys spelled out; None when no key is
    unknown (the caller then lets pydantic's error through, worded by jobs/exit_status.py).
    Values are never echoed: they may be secrets."""
    errors = exc.errors(include_url=False, include_input=False, include_context=False)
    if not any(e["type"] == "extra_forbidden" for e in errors):
        return None
    problems = []
    for e in errors:
        where = ".".join(str(p) for p in e["loc"])
        if e["type"] == "extra_forbidden":
            meant = suggest(root, e["loc"])
            problems.append(f"unknown key {where}" + (f" (did you mean {' or '.join(meant)}?)" if meant else ""))
        else:
            msg = e["msg"].removeprefix("Value error, ")
            problems.append(f"{where}: {msg}" if where else msg)
    return f"{source}: " + "; ".join(problems)


def validate_keys(model: type[Model], data: object, source: str | Path) -> Model:
    """`model.model_validate(data)`, where an unknown key raises a ConfigError that names it, the file
    and the key it probably meant (exit 2, as any configuration error)."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        message = describe(exc, model, source)
        if message is None:
            raise
        raise ConfigError(message) from None
