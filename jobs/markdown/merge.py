"""Scope rules that join thin pieces before and after windowing.

- Small sections: a section under `small_section_tokens` opens a group that takes the following
  sections of the same parent (siblings and their sub-sections) until `merge_target_tokens`; the
  group is titled by the parent, and each joined section brings its heading line into the body. A
  thin reference card becomes one chunk, not five, and no chunk shrinks to a heading and a line.
- Bullets: a window under `bullet_merge_words` holding list items (a heading plus a short list) is
  merged forward into the next window of the same group, up to `bullet_merge_max_words`.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Unit:
    start: int
    end: int
    kind: str  # sent | list | quote | code | table | html | heading
    block: int
    text: str  # normalized
    tokens: int = 0
    words: int = 0


@dataclass
class Group:
    heading_path: list[str]  # the breadcrumb's headings (the parent's when sections were merged)
    level: int
    units: list[Unit] = field(default_factory=list)
    sections: int = 1
    see_also: list[str] = field(default_factory=list)  # lines from navigation sections that followed
    heading_unit: Unit | None = None  # the group's own heading line, for when it joins a group above

    @property
    def tokens(self) -> int:
        return sum(u.tokens for u in self.units)


def _within(parent: list[str], path: list[str]) -> bool:
    return path[: len(parent)] == parent


def merge_small_sections(sections: list[dict], units: list[list[Unit]], heading_units: list[Unit | None],
                         small: int, target: int) -> list[Group]:
    """Sections → groups. `heading_units[i]` is section i's heading line as a unit (None for the preamble)."""
    groups: list[Group] = []
    i = 0
    while i < len(sections):
        first, sec = i, sections[i]
        group = Group(list(sec["heading_path"]), sec["level"], list(units[i]), heading_unit=heading_units[i])
        i += 1
        if group.tokens >= small:
            groups.append(group)
            continue
        parent = sec["heading_path"][:-1]
        while i < len(sections) and sections[i]["level"] > 0 and _within(parent, sections[i]["heading_path"]):
            joined = ([heading_units[i]] if heading_units[i] else []) + units[i]
            if group.tokens + sum(u.tokens for u in joined) > target:
                break
            if group.sections == 1:
                # Now titled by the parent: the opening section's heading moves into the body.
                opening = [heading_units[first]] if heading_units[first] else []
                group.units = opening + group.units
                group.heading_path, group.level = list(parent), max(sec["level"] - 1, 0)
            group.units += joined
            group.sections += 1
            i += 1
        groups.append(group)
    # A heading with no body that joined nothing carries no content of its own.
    groups = [g for g in groups if any(u.kind != "heading" for u in g.units)]
    return _merge_back(groups, small, target)


def _merge_back(groups: list[Group], small: int, target: int) -> list[Group]:
    """A thin group that could not take the next section (a closing note, a last short section)
    joins the group before it when that stays within the target and under the same parent."""
    out: list[Group] = []
    for g in groups:
        prev = out[-1] if out else None
        if prev is None or g.tokens >= small or prev.tokens + g.tokens > target:
            out.append(g)
            continue
        if _within(prev.heading_path, g.heading_path):
            pass  # g sits under prev: prev's breadcrumb still holds
        elif prev.heading_path and _within(prev.heading_path[:-1], g.heading_path):
            # A sibling: the merged group is titled by the common parent, prev's heading moves into the body.
            if prev.heading_unit is not None and (not prev.units or prev.units[0] is not prev.heading_unit):
                prev.units.insert(0, prev.heading_unit)
            prev.heading_path, prev.level = prev.heading_path[:-1], max(prev.level - 1, 0)
        else:
            out.append(g)
            continue
        if g.heading_unit is not None and (not g.units or g.units[0] is not g.heading_unit):
            prev.units.append(g.heading_unit)
        prev.units += g.units
        prev.sections += g.sections
    return out


def merge_bullet_windows(windows: list[list[Unit]], min_words: int, max_words: int) -> list[list[Unit]]:
    out: list[list[Unit]] = []
    pending: list[Unit] | None = None
    for w in windows:
        if pending is not None:
            merged = pending + [u for u in w if u not in pending]
            if sum(u.words for u in merged) <= max_words:
                w = merged
            else:
                out.append(pending)
            pending = None
        words = sum(u.words for u in w)
        if words < min_words and any(u.kind == "list" for u in w):
            pending = w
            continue
        out.append(w)
    if pending is not None:
        out.append(pending)
    return out
