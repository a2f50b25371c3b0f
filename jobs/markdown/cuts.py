"""Units over the window cut into parts that each fit it (jobs/markdown/windows.py decides when).

A table is cut between rows with its header repeated; a code block between lines, each part fenced
again with the opening fence's info string; a list item, quote, HTML block or sentence between
lines, then sentences, then words (then tokens, for a "word" over the budget). Parts are of about
equal size, and each points at its own range of the source.
"""

from __future__ import annotations

import re
from collections import Counter

from jobs.chunks.quality import word_count
from jobs.embed.tokens import TokenCounter
from jobs.markdown.merge import Unit
from jobs.markdown.normalize import normalize


def split_table(unit: Unit, text: str, counter: TokenCounter, budget: int) -> list[Unit]:
    """A table over the budget, cut between rows; every part repeats the header row(s), so each
    chunk still says what its columns are. Offsets of a part cover its own rows."""
    lines, pos = [], unit.start
    source_lines, shown = text[unit.start:unit.end].split("\n"), unit.text.split("\n")
    if len(source_lines) != len(shown):  # normalization only ever rewrites inside a line
        return [unit]
    for line, norm in zip(source_lines, shown):
        lines.append((pos, pos + len(line), norm))
        pos += len(line) + 1
    head_n = 2 if len(lines) > 1 and set(lines[1][2].replace("|", "").replace(":", "").strip()) <= {"-", " "} else 1
    header = "\n".join(line for _, _, line in lines[:head_n])
    rows = lines[head_n:]
    if not rows:
        return [unit]
    header_tokens, *row_tokens = counter.count([header] + [r[2] for r in rows])
    parts = _pack_rows(rows, row_tokens, header_tokens, budget)
    # Even out the parts (a greedy cut leaves a last part of one row, a fragment of its own).
    even_target = sum(row_tokens) / len(parts)
    even, sizes, current, acc = [], [], [], 0
    for row, n in zip(rows, row_tokens):
        if current and acc + n / 2 > even_target and len(even) < len(parts) - 1:
            even.append(current)
            sizes.append(acc)
            current, acc = [], 0
        current.append(row)
        acc += n
    even.append(current)
    sizes.append(acc)
    if all(header_tokens + size <= budget or len(p) == 1 for p, size in zip(even, sizes)):
        parts = even
    out = []
    for part in parts:
        body = header + "\n" + "\n".join(line for _, _, line in part)
        out.append(Unit(part[0][0], part[-1][1], "table", unit.block, body, words=word_count(body)))
    for u, n in zip(out, counter.count([u.text for u in out])):
        u.tokens = n
    return out


# Where an over-long list item, HTML block or sentence may be cut: between lines, then after a
# sentence's end, then between words.
_SENTENCE_END = re.compile(r"(?<=[.!?;])[ \t]+(?=\S)")
_WORD_GAP = re.compile(r"\s+")


def _atoms(src: str, tokens_of, budget: int, offsets_of=None) -> list[tuple[int, int]]:
    """[a, b) pieces of `src`: its lines, with lines over `budget` cut again after sentence ends.
    With `offsets_of` (token character offsets), a piece still over `budget` is cut once more into
    runs of words of about half the budget each (see _word_runs)."""
    out, pos = [], 0
    for line in src.split("\n"):
        a, b = pos, pos + len(line)
        pos = b + 1
        if not line.strip():
            continue
        if tokens_of(line) <= budget:
            out.append((a, b))
            continue
        pieces, cut = [], a
        for m in _SENTENCE_END.finditer(line):
            pieces.append((cut, a + m.start()))
            cut = a + m.end()
        pieces.append((cut, b))
        for pa, pb in pieces:
            if offsets_of is not None and (len(pieces) == 1 or tokens_of(src[pa:pb]) > budget):
                out.extend((pa + x, pa + y) for x, y in _word_runs(src[pa:pb], offsets_of, budget))
            else:
                out.append((pa, pb))
    return out


def _word_runs(piece: str, offsets_of, budget: int) -> list[tuple[int, int]]:
    """[a, b) runs of `piece` of at most about budget/2 tokens, cut at the last gap between words
    in the second half of each run, else between two tokens (one "word" over the budget: a URL, a
    base64 blob, text in a script written without spaces). Half the budget, so split_long_unit can
    pack and even them out."""
    offsets = offsets_of(piece)
    size = max(budget // 2, 1)
    if len(offsets) <= size:
        return [(0, len(piece))]
    runs, i = [], 0
    while i < len(offsets):
        j = min(i + size, len(offsets))
        if j < len(offsets):
            # the last token in the second half of the run that starts after a gap between words
            for k in range(j, i + size // 2, -1):
                if _WORD_GAP.fullmatch(piece[offsets[k - 1][1]:offsets[k][0]] or "x"):
                    j = k
                    break
        a, b = offsets[i][0], offsets[j - 1][1]
        runs.append((a, b))
        i = j
    return runs


def _even_parts(atoms: list[tuple[int, int]], sizes: list[int], budget: int) -> list[list[tuple[int, int]]]:
    """Atoms packed into as few parts as a greedy cut at `budget` needs, then evened out: a greedy
    cut leaves a last part of one line, a fragment of its own."""
    greedy, acc = 1, 0
    for n in sizes:
        if acc and acc + n > budget:
            greedy, acc = greedy + 1, 0
        acc += n
    target = sum(sizes) / greedy
    parts, current, acc = [], [], 0
    for atom, n in zip(atoms, sizes):
        if current and (acc + n > budget or (acc + n / 2 > target and len(parts) < greedy - 1)):
            parts.append(current)
            current, acc = [], 0
        current.append(atom)
        acc += n
    parts.append(current)
    return parts


def split_long_unit(unit: Unit, text: str, counter: TokenCounter, budget: int) -> list[Unit]:
    """A list item, quote, HTML block or unfenced code block over the budget, cut between lines (then
    sentences) into parts of about equal size, each within the budget where the atoms allow. Each part
    points at its own source range and is normalized on its own. Fenced code blocks and tables have
    their own cutters: their parts must stay a fenced block and a table with its header."""
    src = text[unit.start:unit.end]
    atoms = _atoms(src, lambda s: counter.count([s])[0], budget, counter.offsets)
    if len(atoms) < 2:
        return [unit]
    parts = _even_parts(atoms, counter.count([src[a:b] for a, b in atoms]), budget)
    out = []
    for part in parts:
        a, b = part[0][0], part[-1][1]
        body = normalize(src[a:b], unit.kind, Counter())  # the unit's changes were counted already
        if body:
            out.append(Unit(unit.start + a, unit.start + b, unit.kind, unit.block, body, words=word_count(body)))
    for u, n in zip(out, counter.count([u.text for u in out])):
        u.tokens = n
    return out or [unit]


# A code unit's opening fence (parse.py typed the block); indented past 3 columns inside a list item.
_FENCE = re.compile(r"^[ \t]*(?P<fence>`{3,}|~{3,})")


def split_code(unit: Unit, text: str, counter: TokenCounter, budget: int) -> list[Unit]:
    """A fenced code block over the budget, cut between lines (a line over the budget between
    words, then tokens) into parts of about equal size. Every part is a fenced block again: the
    opening fence line, info string included, and the closing fence are repeated, so each chunk still
    reads as code in its language. Offsets of a part cover its own lines. Code with no fence of its
    own to repeat (indented code, a fence inside a quote's `>` lines) is cut between lines as it is."""
    src = text[unit.start:unit.end]
    lines = src.split("\n")
    m = _FENCE.match(lines[0])
    if not m:
        return split_long_unit(unit, text, counter, budget)
    if len(lines) < 3:
        return [unit]
    fence, opener = m["fence"], lines[0].strip()
    closed = lines[-1].strip() and set(lines[-1].strip()) == {fence[0]} and len(lines[-1].strip()) >= len(fence)
    inner_a = len(lines[0]) + 1
    inner_b = len(src) - len(lines[-1]) - 1 if closed else len(src)
    inner = src[inner_a:inner_b]
    (wrap_tokens,) = counter.count([f"{opener}\n\n{fence}"])
    room = max(budget - wrap_tokens, 8)
    atoms = [(inner_a + a, inner_a + b) for a, b in _atoms(inner, lambda s: counter.count([s])[0], room,
                                                           counter.offsets)]
    if len(atoms) < 2:
        return [unit]
    parts = _even_parts(atoms, counter.count([src[a:b] for a, b in atoms]), room)
    out = []
    for n, part in enumerate(parts):
        a, b = part[0][0], part[-1][1]
        body = normalize(f"{opener}\n{src[a:b]}\n{fence}", "code", Counter())  # counted with the unit already
        start = unit.start if n == 0 else unit.start + a
        end = unit.end if n == len(parts) - 1 else unit.start + b
        out.append(Unit(start, end, "code", unit.block, body, words=word_count(body)))
    for u, n in zip(out, counter.count([u.text for u in out])):
        u.tokens = n
    return out


def _pack_rows(rows: list, row_tokens: list[int], header_tokens: int, budget: int) -> list[list]:
    parts, current, tokens = [], [], header_tokens
    for row, n in zip(rows, row_tokens):
        if current and tokens + n > budget:
            parts.append(current)
            current, tokens = [], header_tokens
        current.append(row)
        tokens += n
    parts.append(current)
    return parts
