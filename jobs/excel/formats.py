"""Cell values as the workbook shows them: Excel number formats, dates, booleans, cleaned text.

A row's text is read by people and embedded, so `12553` under `#,##0` must read `12,553`, `-81`
under an accounting format `(81)`, and a date whose format spells the month `8 January 1947`;
other dates are ISO, whatever the locale. Formula errors (`#N/A`) read as empty cells.
"""

from __future__ import annotations

import datetime as dt
import re
from decimal import ROUND_HALF_UP, Decimal

from jobs.excel.cells import clean_text

__all__ = ["EXCEL_ERRORS", "format_value"]

# Formula errors say nothing about the row; they read as empty cells.
EXCEL_ERRORS = {"#N/A", "#DIV/0!", "#REF!", "#VALUE!", "#NAME?", "#NUM!", "#NULL!", "#SPILL!", "#CALC!"}
# One token of an Excel number-format section.
_FMT_TOKEN = re.compile(
    r'"(?P<quoted>[^"]*)"'                      # "literal text"
    r"|\\(?P<escaped>.)"                        # \x: one literal character
    r"|[_*]."                                   # _x pads by the width of x, *x fills with x: layout only
    r"|\[\$(?P<currency>[^\]\-]*)[^\]]*\]"      # [$€-407]: a currency symbol and its locale
    r"|\[[^\]]*\]"                              # [Red], [>=100]: colours and conditions
    r"|(?P<number>[#0?,.]*[#0?][#0?,.]*)"       # the digits: 0 and # placeholders, thousands comma, point
    r"|(?P<exp>[Ee][+-][0#]+)"                  # scientific exponent
    r"|(?P<general>General)"
    r"|(?P<other>.)",
    re.S,
)
_DATE_TOKEN = re.compile(r'yyyy|yy|mmmm|mmm|mm|m|dddd|ddd|dd|d|"[^"]*"|\\.|\[[^\]]*\]|[_*].|.', re.I | re.S)
_MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December"]
_DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]


def _general(value: float) -> str:
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() and abs(value) < 1e15 else f"{value:.10g}"
    return str(value)


def _half_up(value: float, places: int) -> Decimal:
    """`value` rounded to `places` decimals as Excel rounds what it shows: from its 15 significant digits,
    halves away from zero (Python's float formatting rounds halves to even: 0.3125 as 0.0% read 31.2%)."""
    return Decimal(f"{value:.15g}").quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)


def _digits(value: float, block: str, exp: str | None) -> str:
    stripped = block.rstrip(",")
    value /= 1000 ** (len(block) - len(stripped))  # a trailing comma shows thousands: "#,##0," -> 12 for 12,345
    integer, _, fraction = stripped.partition(".")
    most = sum(ch in "0#?" for ch in fraction)
    least = fraction.count("0")
    if exp:
        return f"{value:.{most}E}"
    text = f"{_half_up(value, most):{',' if ',' in integer else ''}.{most}f}"
    if most > least:  # "#" decimals are optional digits: 0.## shows 1.5, not 1.50
        keep = len(text) - (most - least)
        text = text[:keep] + text[keep:].rstrip("0")
        text = text.rstrip(".")
    zeros = integer.count("0")
    if zeros > 1 and "," not in integer:  # "00000": at least that many digits, a ZIP code keeps its 0
        whole, point, rest = text.partition(".")
        text = whole.zfill(zeros) + point + rest
    return text


def _digit_groups(value: float, blocks: list[str]) -> list[str]:
    """A whole number spread over several digit groups (`000-00-0000`, `(000) 000-0000`), filled from
    the right as Excel fills them: each group takes its share of the last digits, padded with 0 where
    its placeholder is a 0; the first group takes whatever digits are left."""
    digits = str(_half_up(value, 0))
    out: list[str] = []
    for i, block in reversed(list(enumerate(blocks))):
        size = sum(ch in "0#?" for ch in block)
        if i == 0:
            taken, digits = digits, ""
        else:
            taken, digits = digits[-size:] if size else "", digits[:-size] if size else digits
        zeros = block.count("0")
        out.append(taken.zfill(zeros) if zeros > len(taken) else taken)
    return out[::-1]


def _sections(fmt: str) -> list[str]:
    """positive;negative;zero;text, splitting on ';' outside quotes and escapes."""
    sections, current, quoted, escaped = [], [], False, False
    for ch in fmt:
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == '"':
            quoted = not quoted
        elif ch == ";" and not quoted:
            sections.append("".join(current))
            current = []
            continue
        current.append(ch)
    return sections + ["".join(current)]


_CONDITION = re.compile(r"\[(<=|>=|<>|<|>|=)\s*(-?[0-9.]+(?:[Ee][+-]?[0-9]+)?)\]")


def _holds(value: float, condition: re.Match) -> bool:
    op, bound = condition.group(1), float(condition.group(2))
    return {"<=": value <= bound, ">=": value >= bound, "<>": value != bound, "<": value < bound,
            ">": value > bound, "=": value == bound}[op]


def _mark(name) -> str:
    """Where a digit group's (or General's) text goes in a section's output (no cell text holds \\x01)."""
    return f"\x01{name}\x01"


def _format_number(value: float, fmt: str) -> str:
    sections = _sections(fmt)
    section, signed = sections[0], value < 0
    conditions = [_CONDITION.search(sec) for sec in sections[:3]]
    if any(conditions):  # [<=9999999]###-####;(###) ###-####: the first section whose condition holds
        chosen = next((i for i, c in enumerate(conditions) if c is None or _holds(value, c)),
                      min(2, len(sections) - 1))
        section = sections[chosen]
        signed = signed and (chosen >= len(conditions) or conditions[chosen] is None)  # its condition's own look
    elif value < 0 and len(sections) > 1:
        section, signed = sections[1], False  # the section says how negatives look, e.g. (81)
    elif value == 0 and len(sections) > 2:
        section = sections[2]
    if "?/" in section:
        return _general(value)  # fractions: rare, and the general form says the same
    out: list[str] = []
    blocks: list[str] = []
    exp = None
    general = percent = False
    for m in _FMT_TOKEN.finditer(section):
        kind = m.lastgroup
        if kind in ("quoted", "escaped", "currency"):
            out.append(m.group(kind))
        elif kind == "number" and not general:
            out.append(_mark(len(blocks)))
            blocks.append(m.group("number"))
        elif kind == "exp":
            exp = m.group("exp")
        elif kind in ("general", "other") and (kind == "general" or m.group("other") == "@"):
            # General, and @ (the Text format) on a number: the number as General shows it
            if not blocks and not general:
                general = True
                out.append(_mark("g"))
        elif kind == "other":
            ch = m.group("other")
            if ch.isalpha():
                return _general(value)  # date or time codes on a plain number: no reliable rendering
            percent = percent or ch == "%"
            out.append(ch)
    if not blocks and not general:
        return "".join(out).strip()  # a section with no digits, e.g. "—" for zero
    magnitude = abs(value) * (100 if percent else 1)
    text = "".join(out)
    if general:
        shown = _general(magnitude)
        text = text.replace(_mark("g"), shown)
    elif len(blocks) > 1 and not exp and float(magnitude).is_integer() and not any("." in b for b in blocks):
        groups = _digit_groups(magnitude, blocks)
        shown = "".join(groups)
        for i, group in enumerate(groups):
            text = text.replace(_mark(i), group)
    else:  # one digit block; any later one (a second number in one section) shows nothing
        shown = _digits(magnitude, blocks[0], exp)
        text = text.replace(_mark(0), shown)
        for i in range(1, len(blocks)):
            text = text.replace(_mark(i), "")
    text = text.strip()
    return f"-{text}" if signed and shown.strip("0.,") else text


def _named_date(value: dt.date, fmt: str | None) -> str | None:
    """Dates whose format spells the month (`d mmmm yyyy`) read as the workbook shows them; others are ISO."""
    fmt = (fmt or "").split(";")[0]
    if "mmm" not in fmt.lower() or re.search(r"[hs]", re.sub(r'"[^"]*"|\[[^\]]*\]', "", fmt), re.I):
        return None
    out = []
    for tok in _DATE_TOKEN.findall(fmt):
        t = tok.lower()
        if t == "yyyy":
            out.append(f"{value.year:04d}")
        elif t == "yy":
            out.append(f"{value.year % 100:02d}")
        elif t in ("mmmm", "mmm"):
            out.append(_MONTHS[value.month - 1] if t == "mmmm" else _MONTHS[value.month - 1][:3])
        elif t in ("mm", "m"):
            out.append(f"{value.month:02d}" if t == "mm" else str(value.month))
        elif t in ("dddd", "ddd"):
            out.append(_DAYS[value.weekday()] if t == "dddd" else _DAYS[value.weekday()][:3])
        elif t in ("dd", "d"):
            out.append(f"{value.day:02d}" if t == "dd" else str(value.day))
        elif tok.startswith('"'):
            out.append(tok[1:-1])
        elif tok.startswith("\\"):
            out.append(tok[1:])
        elif not tok.startswith(("[", "_", "*")):
            out.append(tok)
    return "".join(out).strip() or None


def format_value(value, number_format: str | None = None) -> str:
    """A cell as the workbook shows it: percent, thousands, currency and negatives in parentheses follow the
    number format; dates are ISO unless the format spells the month; text is cleaned (tags, escapes, spaces)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dt.datetime):
        named = _named_date(value, number_format)
        if named:
            return named
        return value.date().isoformat() if value.time() == dt.time(0) else value.isoformat(sep=" ", timespec="minutes")
    if isinstance(value, dt.date):
        return _named_date(value, number_format) or value.isoformat()
    if isinstance(value, (dt.time, dt.timedelta)):
        return value.isoformat() if isinstance(value, dt.time) else str(value)
    if isinstance(value, (int, float)):
        try:
            return _format_number(value, number_format or "General")
        except (ValueError, OverflowError):
            return _general(value)
    text = clean_text(str(value))
    return "" if text in EXCEL_ERRORS else text
